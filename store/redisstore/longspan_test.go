package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// day is a calendar-free day, for the lengths of the limits below.
const day = 24 * time.Hour

// longLimits are limits whose spans (a window, a bucket's worth of time, a
// lease) are longer than 2^53 ns, about 104 days, the largest integer a
// Lua double holds exactly: a year's fixed window is what an Envoy
// descriptor with unit: year becomes. Their parameters keep every span a
// multiple of 8 ns, so the script's doubles still hold them exactly.
func longLimits() []floodgate.Limit {
	return []floodgate.Limit{
		{Name: "year", Algorithm: floodgate.FixedWindow, Max: 5, Window: 365 * day},
		{Name: "fixed200d", Algorithm: floodgate.FixedWindow, Max: 4, Window: 200 * day},
		{Name: "counter200d", Algorithm: floodgate.SlidingWindow, Max: 6, Window: 200 * day},
		{Name: "log200d", Algorithm: floodgate.SlidingLog, Max: 4, Window: 200 * day},
		{Name: "bucket200d", Algorithm: floodgate.TokenBucket, Rate: 1, Per: day, Burst: 200},
		{Name: "gcra150d", Algorithm: floodgate.GCRA, Rate: 2, Per: day, Burst: 300},
		{Name: "conc200d", Algorithm: floodgate.Concurrency, Max: 3, LeaseTTL: 200 * day},
	}
}

// TestLongSpansMatchMemstore runs the same requests at the same instants
// through the memory store and the Redis store (standalone and Cluster)
// on limits whose spans pass 104 days, and wants the same decisions, field
// by field: a wait or a reset is never cut short by the script.
func TestLongSpansMatchMemstore(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			rs := storeOn(t, mode)
			for _, l := range longLimits() {
				t.Run(l.Name, func(t *testing.T) { longMatch(t, rs, ruletest.Rule(t, l)) })
			}
		})
	}
}

func longMatch(t *testing.T, rs *Store, r *limiter.Rule) {
	ctx := context.Background()
	// Early in a 365-day window of the epoch, so that its end is far.
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMicro()
	ms, err := memstore.New(memstore.Options{Now: func() int64 { return now * 1000 }, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	defer rs.testNow.Store(0)
	rng := rand.New(rand.NewPCG(uint64(len(r.Name())), 11))
	capacity := r.Params().Capacity()
	allowed, denied := 0, 0
	for step := 0; step < 60; step++ {
		if rng.IntN(3) > 0 {
			now += rng.Int64N(int64(3 * day / time.Microsecond))
		}
		rs.testNow.Store(now)
		cost := int64(1)
		if rng.IntN(3) == 0 {
			cost = 1 + rng.Int64N(capacity)
		}
		hits := []limiter.Hit{{Rule: r, Key: "long", Cost: cost, Lease: uint64(1 + rng.IntN(4))}}
		peek := rng.IntN(8) == 0
		mem := make([]floodgate.Decision, 1)
		red := make([]floodgate.Decision, 1)
		errM := ms.Decide(ctx, hits, peek, mem)
		errR := rs.Decide(ctx, hits, peek, red)
		desc := fmt.Sprintf("step %d at %s, cost %d, peek %v", step,
			time.UnixMicro(now).UTC().Format(time.RFC3339Nano), cost, peek)
		if (errM == nil) != (errR == nil) || (errM != nil && !errors.Is(errR, floodgate.ErrNeverFits)) {
			t.Fatalf("%s: memstore error %v, redis error %v", desc, errM, errR)
		}
		mem[0].At = 0
		if !sameMarked(&mem[0], &red[0]) || mem[0] != red[0] {
			t.Fatalf("%s:\n memstore %+v\n redis    %+v", desc, mem[0], red[0])
		}
		if mem[0].Allowed {
			allowed++
		} else {
			denied++
		}
	}
	if allowed == 0 || denied == 0 {
		t.Fatalf("%d allowed, %d denied: the sequence does not exercise the limit", allowed, denied)
	}
}

// TestLongFixedWindowKeyLastsItsWindow: the key of a fixed window longer
// than 104 days (a year, Envoy's unit: year) lives until its window ends.
// A key that expired sooner would forget the count and hand the subject
// a second allowance within the same window.
func TestLongFixedWindowKeyLastsItsWindow(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			defer s.testNow.Store(0)
			ctx := context.Background()
			r := ruletest.Rule(t, floodgate.Limit{Name: "yearly", Algorithm: floodgate.FixedWindow, Max: 2, Window: 365 * day})
			now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
			s.testNow.Store(now.UnixMicro())
			hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 2}}
			out := make([]floodgate.Decision, 1)
			if err := s.Decide(ctx, hits, false, out); err != nil || !out[0].Allowed {
				t.Fatalf("charge: %+v %v", out[0], err)
			}
			w := int64(365 * day)
			left := time.Duration(w - now.UnixNano()%w)
			srv := sharedServer(t)
			if mode == "cluster" {
				var err error
				if srv, err = sharedCluster(t).PrimaryOf(int(slot(s.Key(r, "k")))); err != nil {
					t.Fatal(err)
				}
			}
			ttl, err := srv.Do("PTTL", s.Key(r, "k"))
			if err != nil {
				t.Fatal(err)
			}
			ms, err := strconv.ParseInt(ttl, 10, 64)
			if err != nil || time.Duration(ms)*time.Millisecond < left {
				t.Fatalf("key PTTL %s ms, want at least %d ms (until the window ends)", ttl, left.Milliseconds())
			}
			if out[0].ResetAfter != left {
				t.Fatalf("reset after %s, want %s (the window's end)", out[0].ResetAfter, left)
			}
			if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, false, out); err != nil || out[0].Allowed {
				t.Fatalf("charge over the limit: %+v %v", out[0], err)
			}
			if out[0].RetryAfter != left {
				t.Fatalf("retry after %s, want %s (the window's end)", out[0].RetryAfter, left)
			}
			// A lease (Leased consistency) writes the window as a charge does.
			g, err := s.Lease(ctx, &limiter.Hit{Rule: r, Key: "leased", Cost: 1}, 2, limiter.Giveback{})
			if err != nil || g.Units != 2 || g.Decision.ResetAfter != left {
				t.Fatalf("lease: %+v %v, want 2 units and a reset after %s", g, err, left)
			}
			ttl, err = srv.Do("PTTL", s.Key(r, "leased"))
			if err != nil {
				t.Fatal(err)
			}
			if ms, err = strconv.ParseInt(ttl, 10, 64); err != nil || time.Duration(ms)*time.Millisecond < left {
				t.Fatalf("leased key PTTL %s ms, want at least %d ms (until the window ends)", ttl, left.Milliseconds())
			}
		})
	}
}
