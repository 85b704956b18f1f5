package identity

import (
	"net/netip"
	"strings"
)

// Forwarding headers a Resolver can read.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded"
)

// ParsePeer parses an http.Request.RemoteAddr ("ip:port", "[v6]:port" or a
// bare address) and unmaps IPv4-mapped IPv6 addresses. It returns the zero
// Addr when RemoteAddr is not an IP address (a Unix socket).
func ParsePeer(remoteAddr string) netip.Addr {
	if a, ok := parseIPv4Peer(remoteAddr); ok {
		return a
	}
	return parsePeer(remoteAddr)
}

// parseIPv4Peer parses the common case, "a.b.c.d:port" or "a.b.c.d", in
// about half netip's time (BenchmarkParsePeer*); it reports false for
// anything else, which parsePeer then reads.
func parseIPv4Peer(s string) (netip.Addr, bool) {
	var ip [4]byte
	i := 0
	for k := range ip {
		start, n := i, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 3 {
			n = n*10 + int(s[i]-'0')
			i++
		}
		if i == start || n > 255 || i-start > 1 && s[start] == '0' {
			return netip.Addr{}, false
		}
		ip[k] = byte(n)
		if k < 3 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
	}
	if i == len(s) {
		return netip.AddrFrom4(ip), true
	}
	if s[i] != ':' {
		return netip.Addr{}, false
	}
	i++
	start, port := i, 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 5 {
		port = port*10 + int(s[i]-'0')
		i++
	}
	if i != len(s) || i == start || port > 65535 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(ip), true
}

// parsePeer is ParsePeer by netip, for every form.
func parsePeer(remoteAddr string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if a, err := netip.ParseAddr(strings.Trim(remoteAddr, "[]")); err == nil {
		return a.Unmap().WithZone("")
	}
	return netip.Addr{}
}

// parseHop parses one forwarded address: a bare IP, ip:port, [v6] or
// [v6]:port, optionally in double quotes (Forwarded). It returns false for
// anything else: "unknown", obfuscated identifiers, zones, garbage, and
// the IPv4 forms that inet_aton reads but an address in a header never
// has (0xcb.0.113.81, 0313.0.113.81, 203.0.29521, 3405803857), which
// different readers take for different addresses. It reads at most 64
// bytes (FuzzParseHop).
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Addr().Zone() != "" {
			return netip.Addr{}, false
		}
		return ap.Addr().Unmap(), true
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// forwardedFor extracts the for= parameter of one element of a Forwarded
// field ("for=192.0.2.1;proto=https"). Parameters are cut at semicolons
// outside quoted strings (RFC 7239, section 4), so that a quoted value a
// proxy copied from the client (host="a;for=9.9.9.9") is one value. ok is
// false when the element has no for= parameter, and so is it when it has
// two: a parameter occurs once per element, and an element that names two
// clients names none to believe.
func forwardedFor(elem string) (string, bool) {
	v, found := "", false
	for elem != "" {
		var pair string
		pair, elem = cutQuoted(elem, ';')
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		if found {
			return "", false
		}
		v, found = strings.TrimSpace(val), true
	}
	return v, found
}

// cutQuoted cuts s at the first sep outside a quoted string (a backslash
// quotes the byte after it), as RFC 7230's quoted-string reads.
func cutQuoted(s string, sep byte) (before, after string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// lastQuotedComma returns the index of the last comma of s outside a
// quoted string, or -1. It reads s from the right: a double quote is a
// delimiter unless an odd number of backslashes precedes it, so the
// elements at the right end (those the nearest proxies wrote) are read
// as written whatever unbalanced quotes a client put to their left.
func lastQuotedComma(s string) int {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			n := 0
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				quoted = !quoted
			}
		case ',':
			if !quoted {
				return i
			}
		}
	}
	return -1
}

// walker reads the hops of a forwarding header from right to left without
// splitting the whole header: lines are taken last first, and within a line
// elements are cut at the last comma (in Forwarded, the last one outside a
// quoted string).
type walker struct {
	lines     []string
	line      string
	forwarded bool
}

// next returns the next hop to the left; done is true when none is left.
func (w *walker) next() (hop string, done bool) {
	for {
		if w.line == "" {
			if len(w.lines) == 0 {
				return "", true
			}
			w.line = w.lines[len(w.lines)-1]
			w.lines = w.lines[:len(w.lines)-1]
			continue
		}
		var elem string
		var i int
		if w.forwarded {
			i = lastQuotedComma(w.line)
		} else {
			i = strings.LastIndexByte(w.line, ',')
		}
		if i >= 0 {
			elem, w.line = w.line[i+1:], w.line[:i]
		} else {
			elem, w.line = w.line, ""
		}
		if strings.TrimSpace(elem) == "" {
			continue
		}
		if !w.forwarded {
			return elem, false
		}
		v, ok := forwardedFor(elem)
		if !ok {
			// An element without for= (or with two) says nothing
			// about the client; treat it as an unparseable hop.
			return "", false
		}
		return v, false
	}
}

// clientIP walks the forwarding header right to left from a trusted peer,
// skipping trusted proxies. The first address that is not a trusted proxy
// is the client. If every hop is trusted, the leftmost hop is the client.
//
// A hop that cannot be read (see parseHop) ends the trusted chain, as it
// does in NGINX's realip and Envoy's XFF handling, but it does not make the
// proxy that wrote it the client: clientIP then returns the zero Addr and,
// as via, the last address read (the trusted proxy that reported the
// unreadable hop), under whose name such clients are counted apart from
// the proxy's own requests (UnknownClientKey).
func clientIP(peer netip.Addr, h Header, header string, trusted func(netip.Addr) bool) (client, via netip.Addr) {
	lines := h.Values(header)
	if len(lines) == 0 {
		return peer, netip.Addr{}
	}
	w := walker{lines: lines, forwarded: header == HeaderForwarded}
	client = peer
	// A bound on the hops read keeps a huge header cheap.
	for range 64 {
		hop, done := w.next()
		if done {
			return client, netip.Addr{}
		}
		a, ok := parseHop(hop)
		if !ok {
			return netip.Addr{}, client
		}
		client = a
		if !trusted(a) {
			return client, netip.Addr{}
		}
	}
	return client, netip.Addr{}
}
