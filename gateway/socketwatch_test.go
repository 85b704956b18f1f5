package gateway

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// TestSocketWatchesBounded: the net/http engine's socket watches (each a
// duplicate descriptor held while an answer streams) are bounded by
// Options.SocketWatches: with a bound of 1, three streams open at once hold
// one, the others are watched through their context alone, and every
// watch is given back when its stream ends. Without the bound, each of a
// flood of streams held one more descriptor, which the upstreams'
// connections and the store need.
func TestSocketWatchesBounded(t *testing.T) {
	// Every watch at once (not after a second of streaming): this test
	// runs before the package's parallel ones, which read it in New.
	was := streamWatchAfter
	streamWatchAfter = 0
	t.Cleanup(func() { streamWatchAfter = was })
	rule := ruletest.Rule(t, floodgate.Limit{Name: "many", Algorithm: floodgate.TokenBucket, Rate: 1000, Per: time.Second, Burst: 1000})
	release := make(chan struct{})
	g, srvURL, _ := startFront(t, frontNetHTTP, Options{Matcher: oneRule(rule), Engine: memEngine(t), SocketWatches: 1},
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			_ = http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		})
	srvURL = withConnContext(t, frontNetHTTP, g, srvURL)
	var conns []net.Conn
	for range 3 {
		conns = append(conns, openStream(t, srvURL))
	}
	// The watches begin from timers: once each has had its turn, one
	// holds the bound.
	pollUntil(t, "a socket watch", func() bool { return g.socketWatches.Load() >= 1 })
	time.Sleep(100 * time.Millisecond) // the others' turns (the count is checked, not the time)
	if n := g.socketWatches.Load(); n != 1 {
		t.Errorf("three streams open under a bound of 1: %d socket watches, want 1", n)
	}
	close(release)
	for _, c := range conns {
		c.Close()
	}
	pollUntil(t, "every socket watch given back", func() bool { return g.socketWatches.Load() == 0 })
}
