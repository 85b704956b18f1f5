package fields

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
)

// TestResetContinuousExact holds the RateLimit t of a continuous limit to
// its definition: the seconds, rounded up, until one more unit than
// Remaining is available, which is the exact wait algo gives a peek that
// costs Remaining+1. Intervals that are not a whole number of nanoseconds
// (3 per 7 s) and bursts of many units are where a rounded interval drifts.
func TestResetContinuousExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 7))
	for _, l := range []floodgate.Limit{
		{Name: "a", Algorithm: floodgate.TokenBucket, Rate: 3, Per: 7 * time.Second, Burst: 30},
		{Name: "b", Algorithm: floodgate.GCRA, Rate: 7, Per: 10 * time.Second, Burst: 50},
		{Name: "c", Algorithm: floodgate.TokenBucket, Rate: 3, Per: 4 * time.Second, Burst: 1000},
	} {
		p, err := algo.Compile(&l)
		if err != nil {
			t.Fatal(err)
		}
		h := NewLimit(&l)
		var s algo.State
		now := int64(0)
		for step := 0; step < 20000; step++ {
			now += rng.Int64N(int64(3 * time.Second))
			d, err := p.Decide(&s, algo.Request{Now: now, Cost: 1 + rng.Int64N(3)})
			if err != nil {
				t.Fatal(err)
			}
			got, ok := h.Reset(&d)
			if !ok || d.Remaining+1 > d.Limit {
				continue
			}
			peek := s
			next, err := p.Decide(&peek, algo.Request{Now: now, Cost: d.Remaining + 1, Peek: true})
			if err != nil {
				t.Fatal(err)
			}
			if want := ceilSeconds(next.RetryAfter); got != want {
				t.Fatalf("%s step %d: t=%d, want %d (one more unit than %d in %v; %+v)",
					l.Name, step, got, want, d.Remaining, next.RetryAfter, d)
			}
		}
	}
}
