package gateway

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// poolOf is the pool of route in a gateway made from the file src.
func poolOf(tb testing.TB, src, route string, tr http.RoundTripper) (*Gateway, *Pool) {
	tb.Helper()
	p := compilePolicy(tb, "pool.yaml", src)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(tb, nil), limiter.Options{}), Transport: tr})
	if err != nil {
		tb.Fatal(err)
	}
	if err := g.UseRoutes(p.File()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(g.CloseRoutes)
	for _, r := range p.File().Routes {
		if r.Name == route {
			return g, g.PoolOf(route, r.UpstreamURL)
		}
	}
	tb.Fatalf("no route %s", route)
	return nil, nil
}

const poolFile = `
routes:
  - {name: one, match: {paths: ["/one"]}, upstream: "http://10.0.0.1:8080"}
  - name: rr
    match: {paths: ["/rr"]}
    upstreams: ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]
  - name: least
    match: {paths: ["/least"]}
    upstreams: ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]
    balance: least_requests
    health: {failures: 2, eject: 1h}
limits:
  - {name: wide, rate: 100000000, burst: 1000000000000, key: global}
`

// TestPoolPick: round robin takes each target in turn; least_requests the
// one with the fewest attempts waiting; a target ejected after its
// failures in a row is skipped until none is left untried; Retry stops
// when every target was tried, and takes only what was not sent or can
// be sent again.
func TestPoolPick(t *testing.T) {
	g, rr := poolOf(t, poolFile, "rr", nil)
	if g.PoolOf("one", nil) != nil {
		t.Error("a route with one upstream and no TLS settings has a pool")
	}
	seen := map[string]int{}
	for range 9 {
		seen[rr.Pick(0).Name()]++
	}
	if len(seen) != 3 || seen["http://10.0.0.1:8080"] != 3 {
		t.Errorf("round robin: %v", seen)
	}
	_, least := poolOf(t, poolFile, "least", nil)
	a, b, c := least.targets[0], least.targets[1], least.targets[2]
	least.Start(a)
	least.Start(a)
	least.Start(c)
	if got := least.Pick(0); got != b {
		t.Errorf("least_requests picked %s, want the idle %s", got.Name(), b.Name())
	}
	least.Done(b, 0, errors.New("refused"))
	least.Start(b)
	least.Done(b, 502, nil) // the second failure in a row: out for an hour
	for range 6 {
		if got := least.Pick(0); got == b {
			t.Fatal("an ejected target was picked")
		}
	}
	if got := least.Pick(a.bit | c.bit); got != b {
		t.Errorf("with the others tried, the ejected target is the last resort: got %v", got)
	}
	if least.Pick(a.bit|b.bit|c.bit) != nil {
		t.Error("a target was picked with every one tried")
	}
	if !least.Retry(a.bit, true, false) || !least.Retry(a.bit, false, true) || least.Retry(a.bit, false, false) ||
		least.Retry(a.bit|b.bit|c.bit, true, true) {
		t.Error("Retry: want a retry for what was not sent or can be sent again, while a target is left")
	}
	if states := g.Targets(); len(states) != 6 || !states[0].Healthy || states[0].Route != "rr" {
		t.Errorf("the targets of the two pools: %v", states)
	}
}

// TestPoolNotSent: a connection refused is an error that sent nothing.
func TestPoolNotSent(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	_, err := (&http.Client{Timeout: 5 * time.Second}).Get(srv.URL)
	if err == nil || !NotSent(err) {
		t.Errorf("connection refused: %v, not taken for nothing sent", err)
	}
	var d net.Dialer
	if _, err := d.Dial("tcp", srv.Listener.Addr().String()); err == nil || !NotSent(err) {
		t.Errorf("dial: %v", err)
	}
	if NotSent(errors.New("read: connection reset by peer")) {
		t.Error("a reset taken for nothing sent")
	}
}

// staticTransport answers every request at once, in process: the pool
// benchmarks measure the gateway alone.
type staticTransport struct{}

func (staticTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r, ProtoMajor: 1, ProtoMinor: 1}, nil
}

// BenchmarkPoolPass is the reverse proxy passing a request to a route with
// one upstream, and to a pool of three (round robin, and least_requests
// with passive health), over a transport that answers in process: the
// difference is what a pool costs a request.
func BenchmarkPoolPass(b *testing.B) {
	for _, route := range []string{"one", "rr", "least"} {
		b.Run(route, func(b *testing.B) {
			g, _ := poolOf(b, poolFile, route, staticTransport{})
			benchReverse(b, g, "/"+route)
		})
	}
}

// benchReverse serves GET path through the gateway's reverse proxy.
func benchReverse(b *testing.B, g *Gateway, path string) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("GET", path, nil)
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			w.code = 0
			g.ServeHTTP(w, r)
			if w.code != 200 {
				b.Errorf("status %d", w.code)
				return
			}
		}
	})
}

// BenchmarkPoolPick is what a pool adds to a request that its first
// target answers: the pick, the attempt noted and its outcome.
func BenchmarkPoolPick(b *testing.B) {
	for _, route := range []string{"rr", "least"} {
		b.Run(route, func(b *testing.B) {
			_, p := poolOf(b, poolFile, route, staticTransport{})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					t := p.Pick(0)
					p.Start(t)
					p.Done(t, 200, nil)
				}
			})
		})
	}
}
