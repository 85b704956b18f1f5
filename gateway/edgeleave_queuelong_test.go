package gateway

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
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
	g, reached := countingQueueGateway(t, rule, store)
	addr := EdgeFrontTimeouts(t, g, read)
	if a := do(t, newClient(t), "GET", "http://"+addr+"/first", nil); a.status != 200 {
		t.Fatalf("first request %d", a.status)
	}
	leaveQueued(t, addr, store, rule, reached, 3*read) // past the read timeout, still queued
}
