package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
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
	_, base, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
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

// TestHopByHopFieldsOfEveryConnectionField: a message may carry its
// Connection field more than once; the fields that any of them names are
// hop-by-hop and removed, both ways, on each engine.
func TestHopByHopFieldsOfEveryConnectionField(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testHopByHopFieldsOfEveryConnectionField)
}

func testHopByHopFieldsOfEveryConnectionField(t *testing.T, fr string) {
	rule := mustRule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour}, false)
	got := make(chan http.Header, 1)
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			got <- r.Header.Clone()
			w.Header()["Connection"] = []string{"keep-alive", "X-Up-Hop"}
			w.Header().Set("X-Up-Hop", "1")
			w.Header().Set("X-Up-Kept", "1")
		})
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: example.test\r\nConnection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Kept: 1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h := <-got
	if h.Get("X-Hop") != "" || h.Get("X-Kept") != "1" {
		t.Errorf("the upstream got %v", h)
	}
	if resp.Header.Get("X-Up-Hop") != "" || resp.Header.Get("X-Up-Kept") != "1" {
		t.Errorf("the client got %v", resp.Header)
	}
}
