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
// the outcomes it is told; counts says what CountsOutcomes answers.
type countingKeeper struct {
	counts   atomic.Bool
	outcomes atomic.Int64
	deadline atomic.Bool // an outcome came with a deadline
}

func (k *countingKeeper) Screen(*Match) (int, time.Duration) { return 0, 0 }

func (k *countingKeeper) Outcome(ctx context.Context, _ *Match, _ bool, _ int) {
	k.outcomes.Add(1)
	if _, ok := ctx.Deadline(); ok {
		k.deadline.Store(true)
	}
}

func (k *countingKeeper) CountsOutcomes() bool { return k.counts.Load() }

// TestOutcomeSkippedWhenNotCounted: a gatekeeper that says it counts no
// outcome is not told any; once it counts them, it is told each request's,
// under a deadline.
func TestOutcomeSkippedWhenNotCounted(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		clock := newTestClock()
		matcher := funcMatcher(func(r *Request, m *Match) error {
			m.Route = "open"
			return nil
		})
		k := &countingKeeper{}
		_, base, c := startFront(t, fr, Options{Matcher: matcher, Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{}),
			Gatekeeper: k}, func(w http.ResponseWriter, r *http.Request) {})
		for range 3 {
			do(t, c, "GET", base+"/", nil)
		}
		if n := k.outcomes.Load(); n != 0 {
			t.Fatalf("told %d outcomes while it counts none", n)
		}
		k.counts.Store(true)
		for range 2 {
			do(t, c, "GET", base+"/", nil)
		}
		// finish runs after the answer is written: wait for it.
		for i := 0; i < 200 && k.outcomes.Load() < 2; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		if n := k.outcomes.Load(); n != 2 {
			t.Fatalf("told %d outcomes, want 2", n)
		}
		if !k.deadline.Load() {
			t.Error("an outcome came without a deadline")
		}
	})
}
