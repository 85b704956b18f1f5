package console_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/console"
)

// TestAdminHostsSetsWebHeaders: what the admin listener answers, served
// or refused for its Host, forbids a browser to frame it, to sniff its
// type, to keep it, to send a Referer from it or to hand it to a page of
// another origin, and allows its page scripts and styles of its own origin
// only, nothing inline; a handler's own Content-Type stays.
func TestAdminHostsSetsWebHeaders(t *testing.T) {
	t.Parallel()
	h := console.AdminHosts([]string{"admin.example.test"}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"keys": []}`))
	}))
	for _, c := range []struct {
		host   string
		status int
		ct     string
	}{
		{"127.0.0.1:9090", 200, "application/json"},
		{"admin.example.test", 200, "application/json"},
		{"attacker.example", 421, "text/plain; charset=utf-8"},
	} {
		r := httptest.NewRequest("GET", "/api/v1/keys", nil)
		r.Host = c.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.status || w.Header().Get("Content-Type") != c.ct {
			t.Errorf("Host %s: %d %q, want %d %q", c.host, w.Code, w.Header().Get("Content-Type"), c.status, c.ct)
		}
		for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
			"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "Cross-Origin-Resource-Policy": "same-origin"} {
			if got := w.Header().Get(name); got != want {
				t.Errorf("Host %s: %s %q, want %q", c.host, name, got, want)
			}
		}
		csp := " " + w.Header().Get("Content-Security-Policy") + ";"
		for _, d := range []string{" default-src 'none';", " script-src 'self';", " style-src 'self';", " frame-ancestors 'none';",
			" base-uri 'none';", " form-action 'none';"} {
			if !strings.Contains(csp, d) {
				t.Errorf("Host %s: Content-Security-Policy %q without %q", c.host, csp, strings.Trim(d, " ;"))
			}
		}
		if strings.Contains(csp, "unsafe-") {
			t.Errorf("Host %s: Content-Security-Policy %q allows inline code", c.host, csp)
		}
	}
}
