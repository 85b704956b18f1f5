package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestLeakyQueuePastWriteDeadlineIsRefused: a request whose place in a
// leaky queue comes after server.timeouts.write, when its answer could no
// longer be written, is refused at once (429 with Retry-After, the queue
// binding) as a full queue refuses it: it never reaches the upstream, and
// it costs what a refusal costs, nothing (the queue is left as it was
// before it came). One whose place comes within the timeout is held and
// forwarded. On both engines and the middleware, each under its server's
// write timeout, with a real upstream on loopback that counts what it
// serves, and a store whose clock stands still (every request arrives at
// the same instant for the queue).
func TestLeakyQueuePastWriteDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	const per = 1200 * time.Millisecond // the second request's wait
	cases := []struct {
		name   string
		write  time.Duration
		status int
	}{
		{"wait past the write timeout", 400 * time.Millisecond, http.StatusTooManyRequests},
		{"wait within the write timeout", 10 * time.Second, http.StatusOK},
	}
	for _, front := range []string{"net/http", "edge", "middleware"} {
		for _, c := range cases {
			t.Run(front+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: per, Burst: 2})
				frozen := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC).UnixNano()
				st, err := memstore.New(memstore.Options{Now: func() int64 { return frozen }, SnapshotInterval: -1, SweepInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.Close() })
				eng := limiter.New(st, limiter.Options{})
				var reached atomic.Int64
				served := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					reached.Add(1)
					_, _ = io.WriteString(w, "served")
				})
				up := httptest.NewServer(served)
				t.Cleanup(up.Close)
				u, _ := url.Parse(up.URL)
				hit := limiter.Hit{Rule: rule, Key: "k", Cost: 1}
				g, err := gateway.New(gateway.Options{Engine: eng,
					Matcher: gateway.MatcherFunc(func(_ *gateway.Request, m *gateway.Match) error {
						m.Hits = append(m.Hits, hit)
						m.Upstream = u
						return nil
					})})
				if err != nil {
					t.Fatal(err)
				}
				base := serveWithWriteTimeout(t, front, g, served, c.write)
				client := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
				t.Cleanup(client.CloseIdleConnections)
				get := func() (*http.Response, string, time.Duration) {
					start := time.Now()
					resp, err := client.Get(base + "/x")
					if err != nil {
						t.Fatalf("no answer (%v) after %v; upstream reached %d times", err, time.Since(start), reached.Load())
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					return resp, string(b), time.Since(start)
				}
				peek := func() floodgate.Decision {
					var res limiter.Result
					if err := eng.Decide(context.Background(), &limiter.Request{Peek: true, Hits: []limiter.Hit{hit}}, &res); err != nil {
						t.Fatal(err)
					}
					d := res.Decisions[0]
					d.At = 0
					return d
				}

				if resp, _, _ := get(); resp.StatusCode != http.StatusOK {
					t.Fatalf("first request: %d", resp.StatusCode)
				}
				before := peek() // the queue with the first request in it
				if !before.Allowed || before.Delay != per {
					t.Fatalf("a request after the first would wait %v (allowed %v), want %v", before.Delay, before.Allowed, per)
				}
				resp, body, took := get()
				after := peek()
				if resp.StatusCode != c.status {
					t.Fatalf("second request, held %v in the queue under a write timeout of %v: %d %q, want %d",
						per, c.write, resp.StatusCode, body, c.status)
				}
				if c.status == http.StatusOK {
					if reached.Load() != 2 {
						t.Errorf("upstream reached %d times, want 2", reached.Load())
					}
					if took < per-50*time.Millisecond {
						t.Errorf("answered after %v, before its place in the queue at %v", took, per)
					}
					if after == before {
						t.Errorf("the forwarded request left the queue as it was: %+v", after)
					}
					return
				}
				if n := reached.Load(); n != 1 {
					t.Errorf("upstream reached %d times, want 1: the refused request was forwarded", n)
				}
				if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
					t.Errorf("Retry-After %q, want whole seconds, at least 1", resp.Header.Get("Retry-After"))
				}
				if rl := resp.Header.Get("RateLimit"); !strings.HasPrefix(rl, `"queue"`) {
					t.Errorf("RateLimit %q: the queue does not bind", rl)
				}
				if after != before {
					t.Errorf("the refused request was charged: the queue after it %+v, before %+v", after, before)
				}
			})
		}
	}
}

// serveWithWriteTimeout serves g on front (the reverse proxy on net/http
// or on the edge engine, or the middleware in front of next) under a
// write timeout of write, on loopback, and returns its base URL.
func serveWithWriteTimeout(t *testing.T, front string, g *gateway.Gateway, next http.Handler, write time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	switch front {
	case "net/http", "middleware":
		var h http.Handler = g
		if front == "middleware" {
			h = g.Middleware(next)
		}
		srv := &http.Server{Handler: h, WriteTimeout: write, ConnContext: gateway.ConnContext}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	case "edge":
		e := edge.New(g, edge.Options{WriteTimeout: write, Fallback: &http.Server{Handler: g, WriteTimeout: write}})
		done := make(chan error, 1)
		go func() { done <- e.Serve(ln) }()
		t.Cleanup(func() { _ = e.Close(); <-done })
	default:
		t.Fatalf("unknown front %q", front)
	}
	return "http://" + ln.Addr().String()
}
