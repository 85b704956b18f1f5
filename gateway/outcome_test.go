package gateway

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// countingKeeper is a Gatekeeper that lets everything through and counts
// the outcomes it is told, with the bound each came with.
type countingKeeper struct {
	outcomes atomic.Int64
	within   atomic.Int64 // the last bound told
	deadline atomic.Bool  // an outcome came with a deadline set by the gateway
}

func (k *countingKeeper) Screen(*Match) (int, time.Duration) { return 0, 0 }

func (k *countingKeeper) Outcome(ctx context.Context, within time.Duration, _ *Match, _ bool, _ int) {
	k.within.Store(int64(within))
	if _, ok := ctx.Deadline(); ok {
		k.deadline.Store(true)
	}
	k.outcomes.Add(1)
}

// TestOutcomeBoundedByTheGatekeeper: the gatekeeper is told every
// request's outcome with the gateway's release timeout as its bound, and
// the gateway sets no deadline of its own (a gatekeeper with nothing to
// count then costs a request nothing).
func TestOutcomeBoundedByTheGatekeeper(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		clock := newTestClock()
		matcher := funcMatcher(func(r *Request, m *Match) error {
			m.Route = "open"
			return nil
		})
		k := &countingKeeper{}
		const bound = 3 * time.Second
		_, base, c := startFront(t, fr, Options{Matcher: matcher, Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{}),
			Gatekeeper: k, ReleaseTimeout: bound}, func(w http.ResponseWriter, r *http.Request) {})
		for range 3 {
			do(t, c, "GET", base+"/", nil)
		}
		// finish runs after the answer is written: wait for it.
		for i := 0; i < 200 && k.outcomes.Load() < 3; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		if n := k.outcomes.Load(); n != 3 {
			t.Fatalf("told %d outcomes, want 3", n)
		}
		if got := time.Duration(k.within.Load()); got != bound {
			t.Errorf("outcome bound %v, want the release timeout %v", got, bound)
		}
		if k.deadline.Load() {
			t.Error("the gateway set a deadline of its own for the outcome")
		}
	})
}
