package gateway

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/floodgate/floodgate/limiter"
)

// FuzzMiddleware sends arbitrary requests (method, path, host, API key,
// forwarded chain, peer address) through the school example: the gateway
// never panics and answers only what it may answer.
func FuzzMiddleware(f *testing.F) {
	f.Add("GET", "/students/9", "example.com", "", "", "192.0.2.1:1234")
	f.Add("GET", "/partner/students/9", "h", "key-trial", "203.0.113.9, 10.0.0.1", "[2001:db8::1]:443")
	f.Add("POST", "/login", "", "key-partner-1", "garbage,,", "not-an-address")
	f.Add("DELETE", "//notices/../urgent/", "x:99", "\x00", "::ffff:1.2.3.4", "")
	pm, err := NewPolicyMatcher(Fixed(loadSchool(f)), PolicyMatcherOptions{})
	if err != nil {
		f.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(f, nil), limiter.Options{})})
	if err != nil {
		f.Fatal(err)
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	f.Fuzz(func(t *testing.T, method, path, host, key, xff, peer string) {
		r := &http.Request{
			Method:     method,
			URL:        &url.URL{Path: path},
			Host:       host,
			Header:     http.Header{},
			RemoteAddr: peer,
			Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		}
		r = r.WithContext(t.Context())
		if key != "" {
			r.Header.Set("X-Api-Key", key)
		}
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusForbidden, http.StatusTooManyRequests:
		default:
			t.Fatalf("status %d for %q %q", w.Code, method, path)
		}
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Fatalf("429 without Retry-After")
		}
	})
}
