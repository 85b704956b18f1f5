package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestHopByHopFields: each engine's proxy removes the hop-by-hop fields
// (and those the Connection field names) both ways, extends
// X-Forwarded-For and sets X-Forwarded-Host and -Proto, as net/http's
// reverse proxy does.
func TestHopByHopFields(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testHopByHopFields)
}

func testHopByHopFields(t *testing.T, fr string) {
	rule := mustRule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour}, false)
	got := make(chan http.Header, 1)
	_, base, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: limiter.New(newMemStore(t, nil), limiter.Options{})},
		func(w http.ResponseWriter, r *http.Request) {
			h := r.Header.Clone()
			h.Set("Host", r.Host)
			got <- h
			w.Header().Set("Connection", "X-Up-Hop")
			w.Header().Set("X-Up-Hop", "1")
			w.Header().Set("X-Up-Kept", "1")
		})
	a := do(t, c, "GET", base+"/x", map[string]string{
		"Connection": "keep-alive, X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5", "Forwarded": "for=192.0.2.9",
		"X-Forwarded-For": "203.0.113.1", "X-Kept": "1", "Proxy-Authorization": "Basic eA==",
	})
	if a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	h := <-got
	for _, name := range []string{"X-Hop", "Keep-Alive", "Forwarded", "Proxy-Authorization"} {
		if v := h.Get(name); v != "" {
			t.Errorf("the upstream got %s: %q", name, v)
		}
	}
	if h.Get("X-Kept") != "1" || h.Get("X-Forwarded-For") != "203.0.113.1, 127.0.0.1" || h.Get("X-Forwarded-Proto") != "http" ||
		h.Get("X-Forwarded-Host") == "" || h.Get("X-Forwarded-Host") == h.Get("Host") {
		t.Errorf("the upstream got %v", h)
	}
	if a.header.Get("X-Up-Hop") != "" || a.header.Get("X-Up-Kept") != "1" || a.header.Get("RateLimit") == "" {
		t.Errorf("the client got %v", a.header)
	}
}
