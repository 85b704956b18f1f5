package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestQueuedClientLeavesPastTheReadTimeout: on the edge engine, a request
// without a body that waits in a leaky queue longer than the read timeout
// is still watched: its client leaving then is seen, the request never
// reaches the upstream, its place is given back and it gets no answer.
// (Until 2026-12-07 the watch ran under the body's read deadline, which a
// request without a body has no use for, and stopped there: a client that
// left later kept its place in the queue.)
func TestQueuedClientLeavesPastTheReadTimeout(t *testing.T) {
	t.Parallel()
	const read = 300 * time.Millisecond
	rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 3})
	store := newMemStore(t, newTestClock().Now)
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "served")
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	g, err := New(Options{Matcher: MatcherFunc(withUpstream{oneRule(rule), u}.Match), Engine: limiter.New(store, limiter.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	addr := EdgeFrontTimeouts(t, g, read)
	nextDelay := func() time.Duration {
		t.Helper()
		out := make([]floodgate.Decision, 1)
		if err := store.Decide(context.Background(), []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}, true, out); err != nil {
			t.Fatal(err)
		}
		return out[0].Delay
	}
	res, err := http.Get("http://" + addr + "/first")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("first request %d", res.StatusCode)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); nextDelay() != 2*time.Minute; {
		if time.Now().After(deadline) {
			t.Fatalf("the request never took its place in the queue (next place %v out)", nextDelay())
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(3 * read) // past the read timeout, still queued
	leavesUnanswered(t, c, "queued past the read timeout")
	if n := reached.Load(); n != 1 {
		t.Errorf("the upstream was reached %d times, want 1 (the queued request never goes on)", n)
	}
	if d := nextDelay(); d != time.Minute {
		t.Errorf("the next place is %v out, want 1m0s: the place of the request whose client left was not given back", d)
	}
}
