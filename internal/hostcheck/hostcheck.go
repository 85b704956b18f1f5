package hostcheck

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Options says whom a listener answers.
type Options struct {
	// Listener names the listener in the 421's reason ("admin", "ops").
	Listener string
	// Setting names the setting that lists Names, for the reason
	// ("server.admin.hosts").
	Setting string
	// Names are the host names, besides IP addresses and localhost, the
	// listener answers to: any case, with or without a final dot.
	Names []string
}

// Handler serves next only to requests that name the listener by an IP
// address, localhost (or a name under .localhost) or one of o.Names; a
// request naming another host is answered 421 with the reason, and its
// connection closed. A request without a Host (HTTP/1.0) names no site and
// is served.
func Handler(o Options, next http.Handler) http.Handler {
	names := make(map[string]bool, len(o.Names))
	for _, n := range o.Names {
		names[normal(n)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allowed(r.Host, names) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusMisdirectedRequest)
		fmt.Fprintf(w, "421 Misdirected Request: the %s listener is not %q; it answers to IP addresses, localhost and the names in %s\n", o.Listener, r.Host, o.Setting)
	})
}

// allowed reports whether host (a Host field, with or without a port)
// is an IP address, empty, localhost, a name under .localhost or in names.
func allowed(host string, names map[string]bool) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = normal(strings.Trim(host, "[]"))
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") || names[host]
}

// normal is name in lower case without its final dot.
func normal(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// ValidName reports whether s is a DNS host name, with or without a final
// dot: dot-separated labels of letters, digits and inner hyphens, the last
// one not all digits (so that 300.1.2.3, a mistyped address, is not taken
// for a name). A name with a port or a scheme is not one.
func ValidName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return strings.TrimLeft(labels[len(labels)-1], "0123456789") != ""
}
