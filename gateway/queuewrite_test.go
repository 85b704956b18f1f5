package gateway_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestLeakyQueueDelayPastWriteTimeoutAlike: a request whose place in a
// leaky queue comes after server.timeouts.write is answered alike on both
// engines.
func TestLeakyQueueDelayPastWriteTimeoutAlike(t *testing.T) {
	t.Parallel()
	const write = 400 * time.Millisecond
	type outcome struct {
		answer  string
		reached int64
	}
	run := func(t *testing.T, engine string) outcome {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: 1200 * time.Millisecond, Burst: 2})
		st, err := memstore.New(memstore.Options{SnapshotInterval: -1, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		var reached atomic.Int64
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			_, _ = io.WriteString(w, "served")
		}))
		t.Cleanup(up.Close)
		u, _ := url.Parse(up.URL)
		g, err := gateway.New(gateway.Options{Engine: limiter.New(st, limiter.Options{}),
			Matcher: gateway.MatcherFunc(func(_ *gateway.Request, m *gateway.Match) error {
				m.Hits = append(m.Hits, limiter.Hit{Rule: rule, Key: "k", Cost: 1})
				m.Upstream = u
				return nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		addr := strings.TrimPrefix(serveWithWriteTimeout(t, engine, g, nil, write), "http://")
		ask := func() string {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(c)
			if i := strings.Index(string(b), "\r\n"); i >= 0 {
				return string(b[:i])
			}
			return string(b)
		}
		if a := ask(); !strings.Contains(a, "200") {
			t.Fatalf("first request: %q", a)
		}
		// The second waits 1.2 s in the queue, past the write timeout.
		return outcome{answer: ask(), reached: reached.Load() - 1}
	}
	nh, ed := make(chan outcome, 1), make(chan outcome, 1)
	t.Run("net/http", func(t *testing.T) { t.Parallel(); nh <- run(t, "net/http") })
	t.Run("edge", func(t *testing.T) { t.Parallel(); ed <- run(t, "edge") })
	t.Cleanup(func() {
		a, b := <-nh, <-ed
		t.Logf("net/http: answer %q, upstream reached %d; edge: answer %q, upstream reached %d", a.answer, a.reached, b.answer, b.reached)
		if a != b {
			t.Errorf("the engines differ on a queued request held past server.timeouts.write: net/http %+v, edge %+v", a, b)
		}
	})
}
