package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// TestQueuedClientGivesWindowsBack: a request that waits in a leaky queue
// also counts on a limit of four, a fixed window, a sliding log, a sliding
// window of an hour or a daily quota; its client leaves before its place
// comes, so it never reaches the upstream, and its charge of that limit
// comes back with its place in the queue (from the window, log or period
// that counted it), on memory and on Redis: the limit holds the first
// request's charge alone.
func TestQueuedClientGivesWindowsBack(t *testing.T) {
	srv := redistest.Start(t)
	for _, l := range []floodgate.Limit{
		{Name: "fixed_window", Algorithm: floodgate.FixedWindow, Max: 4, Window: time.Hour},
		{Name: "sliding_log", Algorithm: floodgate.SlidingLog, Max: 4, Window: time.Hour},
		{Name: "sliding_window", Algorithm: floodgate.SlidingWindow, Max: 4, Window: time.Hour},
		{Name: "quota", Algorithm: floodgate.Quota, Max: 4, Period: floodgate.Day},
	} {
		t.Run(l.Name, func(t *testing.T) {
			t.Parallel()
			forFronts(t, allFronts, func(t *testing.T, front string) {
				testQueuedClientGivesWindowBack(t, front, newMemStore(t, newTestClock().Now), l)
			})
			t.Run("redis", func(t *testing.T) {
				t.Parallel()
				store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr, Prefix: "leave-" + l.Name + ":"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(store.Close)
				testQueuedClientGivesWindowBack(t, frontNetHTTP, store, l)
			})
		})
	}
}

func testQueuedClientGivesWindowBack(t *testing.T, front string, store limiter.Store, l floodgate.Limit) {
	queue := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 3})
	window := ruletest.Rule(t, l)
	matcher := funcMatcher(func(_ *Request, m *Match) error {
		m.Hits = append(m.Hits, limiter.Hit{Rule: queue, Key: "k", Cost: 1}, limiter.Hit{Rule: window, Key: "k", Cost: 1})
		return nil
	})
	_, srvURL, client := startFront(t, front, Options{Matcher: matcher, Engine: limiter.New(store, limiter.Options{Timeout: 2 * time.Second})},
		func(w http.ResponseWriter, r *http.Request) {})
	peekOf := func(r *limiter.Rule) floodgate.Decision {
		t.Helper()
		out := make([]floodgate.Decision, 1)
		if err := store.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, true, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	if a := do(t, client, "GET", srvURL, nil); a.status != http.StatusOK {
		t.Fatalf("first request %d", a.status)
	}
	// The second waits about a minute; its client gives up once it is
	// queued (the next place is then about two minutes out).
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srvURL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	pollUntil(t, "the second request queued", func() bool { return peekOf(queue).Delay > 90*time.Second })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the queued request was answered")
	}
	pollUntil(t, "the place of the request whose client left given back", func() bool { return peekOf(queue).Delay <= 90*time.Second })
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := peekOf(window)
		if d.Allowed && d.Remaining == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after a request served and one whose client left the queue: a peek of 1 says %d remaining, want 2 (the first request's charge alone)", l.Name, d.Remaining)
		}
		time.Sleep(time.Millisecond)
	}
}
