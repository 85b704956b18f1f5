package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// conformLimits are limits of every algorithm, with parameters that make
// their spans exact in microseconds and some that do not.
func conformLimits(t *testing.T) []*limiter.Rule {
	t.Helper()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		ny = time.FixedZone("EST", -5*3600)
	}
	ls := []floodgate.Limit{
		{Name: "tb", Algorithm: floodgate.TokenBucket, Rate: 2, Per: time.Second, Burst: 10},
		{Name: "tb3", Algorithm: floodgate.TokenBucket, Rate: 3, Per: time.Second, Burst: 5},
		{Name: "gcra", Algorithm: floodgate.GCRA, Rate: 7, Per: time.Minute, Burst: 4},
		{Name: "meter", Algorithm: floodgate.LeakyBucket, Rate: 100, Per: time.Second, Burst: 3},
		{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 5},
		{Name: "queue2", Algorithm: floodgate.LeakyQueue, Rate: 3, Per: time.Second, Burst: 12, Delay: 8},
		{Name: "queuend", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 5, Delay: floodgate.NoDelay},
		{Name: "fixed", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Second},
		{Name: "fixed7", Algorithm: floodgate.FixedWindow, Max: 7, Window: 1500 * time.Millisecond},
		{Name: "log", Algorithm: floodgate.SlidingLog, Max: 5, Window: time.Second},
		{Name: "counter", Algorithm: floodgate.SlidingWindow, Max: 6, Window: time.Second},
		{Name: "counter3", Algorithm: floodgate.SlidingWindow, Max: 10, Window: 3 * time.Second},
		{Name: "conc", Algorithm: floodgate.Concurrency, Max: 3, LeaseTTL: 2 * time.Second},
		{Name: "quota", Algorithm: floodgate.Quota, Max: 6, Period: floodgate.Day, Location: ny},
		{Name: "quotaoff", Algorithm: floodgate.Quota, Max: 6, Period: floodgate.Day, Offset: 4,
			Start: time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)},
	}
	var rules []*limiter.Rule
	for _, l := range ls {
		r := ruletest.Rule(t, l)
		rules = append(rules, r)
	}
	return rules
}

// TestConformsToAlgo runs the same random requests through algo (pure) and
// through the store at the same fixed instants, and wants the same
// decisions, field by field.
func TestConformsToAlgo(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			for _, r := range conformLimits(t) {
				t.Run(r.Name(), func(t *testing.T) { conform(t, s, r) })
			}
		})
	}
}

// conformStart is the instant (Unix µs) the randomized tests of r start
// at: a whole second a little before a DST change in New York (for a
// quota, just before midnight there, on the day of the change).
func conformStart(r *limiter.Rule) int64 {
	if r.Algorithm() == floodgate.Quota {
		return time.Date(2026, 3, 8, 4, 59, 58, 0, time.UTC).UnixMicro()
	}
	return time.Date(2026, 3, 7, 23, 59, 50, 0, time.UTC).UnixMicro()
}

func conform(t *testing.T, s *Store, r *limiter.Rule) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(len(r.ID())), 7))
	now := conformStart(r)
	var st algo.State
	key := "conform"
	companion := ruletest.Rule(t, floodgate.Limit{Name: "companion", Algorithm: floodgate.FixedWindow,
		Max: 1 << 40, Window: time.Hour})
	steps := 300
	if testing.Short() {
		steps = 100
	}
	allowed, denied := 0, 0
	for step := 0; step < steps; step++ {
		switch rng.IntN(4) {
		case 0: // same instant
		case 1:
			now += rng.Int64N(1000)
		case 2:
			now += rng.Int64N(400_000)
		default:
			now += rng.Int64N(3_000_000)
		}
		if r.Algorithm() == floodgate.Quota {
			now += rng.Int64N(3600_000_000) // hours: cross day boundaries
		}
		s.testNow.Store(now)
		cost := 1 + rng.Int64N(r.Params().Capacity()+1) // sometimes too big
		if rng.IntN(3) > 0 {
			cost = 1
		}
		lease := uint64(rng.IntN(5))
		op := opCharge
		switch rng.IntN(10) {
		case 0:
			op = opPeek
		case 1:
			if r.Algorithm() == floodgate.Concurrency {
				op = opRelease
			}
		}
		req := algo.Request{Now: now * 1000, Cost: cost, Peek: op == opPeek, Lease: lease}
		var want floodgate.Decision
		var wantErr error
		if op == opRelease {
			wantErr = r.Params().Release(&st, now*1000, lease)
		} else {
			want, wantErr = r.Params().Decide(&st, req)
		}
		// Every other request carries a second hit that always allows, on
		// the same subject (so in the same slot): the script's general path
		// must decide as its one-hit fast path does.
		hits := []limiter.Hit{{Rule: r, Key: key, Cost: cost, Lease: lease}}
		if step%2 == 1 && op != opRelease {
			hits = append(hits, limiter.Hit{Rule: companion, Key: key, Cost: 1})
		}
		out := make([]floodgate.Decision, len(hits))
		err := applyOp(ctx, s, op, hits, out)
		desc := fmt.Sprintf("step %d at %s: op %d cost %d lease %d", step,
			time.UnixMicro(now).UTC().Format("15:04:05.000000"), op, cost, lease)
		if !errors.Is(err, floodgate.ErrNeverFits) || !errors.Is(wantErr, floodgate.ErrNeverFits) {
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("%s: error %v, algo %v", desc, err, wantErr)
			}
		}
		if op == opRelease {
			continue
		}
		out[0].Mark = 0 // where the store counted it: algo has no store
		if out[0] != want {
			t.Fatalf("%s:\n redis %+v\n algo  %+v", desc, out[0], want)
		}
		if want.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	// The sequence must exercise both answers to mean anything.
	if allowed == 0 || denied == 0 {
		t.Fatalf("%d allowed, %d denied: the sequence does not exercise the limit", allowed, denied)
	}
	t.Logf("%d allowed, %d denied", allowed, denied)
}

// TestSlidingLogAtTheCut: an entry exactly one window old has left the
// log, and the wait of a denial counts from the entries still in it; the
// script's bounds are written to the microsecond (a Lua number printed
// with 14 digits would keep the entry).
func TestSlidingLogAtTheCut(t *testing.T) {
	s := newStandalone(t)
	ctx := context.Background()
	r := ruletest.Rule(t, floodgate.Limit{Name: "cut", Algorithm: floodgate.SlidingLog, Max: 5, Window: time.Second})
	t0 := time.Date(2026, 3, 8, 0, 0, 19, 369532000, time.UTC).UnixMicro()
	at := func(us int64, cost int64) floodgate.Decision {
		t.Helper()
		s.testNow.Store(us)
		out := make([]floodgate.Decision, 1)
		if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "cut", Cost: cost}}, false, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	at(t0, 3)
	at(t0+500_000, 1)
	d := at(t0+1_000_000, 5)
	if d.Allowed || d.Remaining != 4 || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("%+v: want a denial with 4 left, for 500ms (the entry of t0 has left)", d)
	}
}
