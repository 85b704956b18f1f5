package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// fakeClockMem returns a memstore that reads the runtime's clock (the fake
// one in a synctest bubble) and starts no goroutines.
func fakeClockMem(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Options{SweepInterval: -1, Now: func() int64 { return time.Now().UnixNano() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// peekStore returns what the store itself answers to a peek of h now.
func peekStore(t *testing.T, s limiter.Store, h limiter.Hit) floodgate.Decision {
	t.Helper()
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), []limiter.Hit{h}, true, out); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// TestDenyCacheFixedWindow: a full window is denied without the store
// until it ends, with the answer the store would give.
func TestDenyCacheFixedWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := fakeClockMem(t)
		ts := &testStore{inner: mem}
		l := limiter.New(ts, limiter.Options{})
		w := ruletest.Rule(t, floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Second})
		hit := limiter.Hit{Rule: w, Key: "k", Cost: 1}
		time.Sleep(100 * time.Millisecond)
		for range 3 {
			if r := check(t, l, hit); !r.Allowed {
				t.Fatalf("%+v", r)
			}
		}
		calls := ts.calls.Load()
		for _, cost := range []int64{1, 2, 3, 1} {
			h := hit
			h.Cost = cost
			r := check(t, l, h)
			want := peekStore(t, mem, h)
			want.At = 0 // the cache does not say when the store would have decided
			if r.Allowed || r.Flags[0] != limiter.Cached || r.Decisions[0] != want || r.RetryAfter != want.RetryAfter {
				t.Fatalf("cost %d: %+v, want the store's %+v, from the cache", cost, r, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if n := ts.calls.Load() - calls; n != 0 {
			t.Fatalf("%d store calls for cached denials", n)
		}
		// 100 + 4·200 ms: the window ended, the store decides again.
		time.Sleep(100 * time.Millisecond)
		if r := check(t, l, hit); !r.Allowed || r.Flags[0]&limiter.Cached != 0 {
			t.Fatalf("next window: %+v", r)
		}
		if st := l.Stats(); st.DenyCacheHits != 4 {
			t.Fatalf("%+v, want 4 hits", st)
		}
	})
}

// TestDenyCacheNeverDeniesWhatStoreAllows runs random requests of every
// cacheable algorithm from two instances on one store, at random instants,
// and checks every answer the cache gives against the store's own at that
// instant: a denial, with no unit left, and waits no longer than the
// store's (equal when the other instance did not charge the key since).
func TestDenyCacheNeverDeniesWhatStoreAllows(t *testing.T) {
	limits := []floodgate.Limit{
		{Name: "tb", Algorithm: floodgate.TokenBucket, Rate: 5, Per: time.Second, Burst: 4},
		{Name: "gcra", Algorithm: floodgate.GCRA, Rate: 3, Per: time.Second, Burst: 2},
		{Name: "meter", Algorithm: floodgate.LeakyBucket, Rate: 7, Per: time.Second, Burst: 3},
		{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 2, Per: time.Second, Burst: 3},
		{Name: "fixed", Algorithm: floodgate.FixedWindow, Max: 4, Window: 700 * time.Millisecond},
		{Name: "log", Algorithm: floodgate.SlidingLog, Max: 3, Window: time.Second},
		{Name: "counter", Algorithm: floodgate.SlidingWindow, Max: 4, Window: time.Second},
		{Name: "quota", Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Day},
	}
	for _, lim := range limits {
		t.Run(lim.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := fakeClockMem(t)
				r := ruletest.Rule(t, lim)
				a := limiter.New(&testStore{inner: mem}, limiter.Options{})
				b := limiter.New(&testStore{inner: mem}, limiter.Options{})
				rng := rand.New(rand.NewPCG(uint64(len(lim.Name)), 3))
				cached := 0
				for step := range 3000 {
					if rng.IntN(3) == 0 {
						time.Sleep(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
					}
					if lim.Algorithm == floodgate.Quota && rng.IntN(200) == 0 {
						time.Sleep(12 * time.Hour)
					}
					l := a
					if rng.IntN(3) == 0 {
						l = b
					}
					h := limiter.Hit{Rule: r, Key: fmt.Sprint("k", rng.IntN(2)), Cost: 1}
					if rng.IntN(4) == 0 {
						h.Cost = 1 + rng.Int64N(r.Capacity())
					}
					want := peekStore(t, mem, h)
					res := check(t, l, h)
					if res.Flags[0]&limiter.Cached == 0 {
						continue
					}
					cached++
					got := res.Decisions[0]
					if want.Allowed || want.Remaining != 0 || got.Remaining != 0 || got.Limit != want.Limit ||
						got.RetryAfter <= 0 || got.RetryAfter > want.RetryAfter || got.ResetAfter > want.ResetAfter {
						t.Fatalf("step %d, cost %d: cache %+v, store %+v", step, h.Cost, got, want)
					}
				}
				if cached == 0 {
					t.Fatal("the cache answered nothing: the test does not exercise it")
				}
				t.Logf("%d of 3000 answered by the cache", cached)
			})
		})
	}
}

// TestDenyCacheScope: shadow and concurrency hits are never cached; a
// request is answered by the cache only when all its hits are denied
// there; a Refund forgets the hits' entries; the cache stays within its
// bound.
func TestDenyCacheScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := fakeClockMem(t)
		ts := &testStore{inner: mem}
		l := limiter.New(ts, limiter.Options{DenyCache: limiter.DenyCacheOptions{Entries: 32}})
		full := ruletest.Rule(t, floodgate.Limit{Name: "full", Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 1})
		other := window(t, "other", 100, floodgate.FailOpen)
		conc := ruletest.Rule(t, floodgate.Limit{Name: "c", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: hour})
		sh := shadowWindow(t, "sh", 1)

		check(t, l, limiter.Hit{Rule: full, Key: "k", Cost: 1})
		if r := check(t, l, limiter.Hit{Rule: full, Key: "k", Cost: 1}); r.Allowed || r.Flags[0]&limiter.Cached != 0 {
			t.Fatalf("first denial comes from the store: %+v", r)
		}
		if r := check(t, l, limiter.Hit{Rule: full, Key: "k", Cost: 1}); r.Flags[0]&limiter.Cached == 0 {
			t.Fatalf("second denial: %+v, want it cached", r)
		}
		// With a hit the cache knows nothing of, the store decides.
		calls := ts.calls.Load()
		r := check(t, l, limiter.Hit{Rule: full, Key: "k", Cost: 1}, limiter.Hit{Rule: other, Key: "k", Cost: 1})
		if r.Allowed || r.Flags[0]&limiter.Cached != 0 || ts.calls.Load() != calls+1 || r.Decisions[1].Remaining != 100 {
			t.Fatalf("mixed request: %+v", r)
		}
		// Shadow and concurrency denials are not cached.
		for _, rule := range []*limiter.Rule{conc, sh} {
			for range 3 {
				if r := check(t, l, limiter.Hit{Rule: rule, Key: "k", Cost: 1}); r.Flags[0]&limiter.Cached != 0 {
					t.Fatalf("%s: %+v, not cacheable", rule.Name(), r)
				}
			}
		}
		// A refund by this limiter forgets the entry.
		if err := l.Refund(context.Background(), []limiter.Hit{{Rule: full, Key: "k", Cost: 1}}); err != nil {
			t.Fatal(err)
		}
		if r := check(t, l, limiter.Hit{Rule: full, Key: "k", Cost: 1}); !r.Allowed {
			t.Fatalf("after the refund: %+v", r)
		}
		// Bounded: 200 exhausted keys, at most 32 kept.
		for i := range 200 {
			h := limiter.Hit{Rule: full, Key: fmt.Sprint("b", i), Cost: 1}
			check(t, l, h)
			check(t, l, h)
		}
		if st := l.Stats(); st.DenyCacheEntries > 32 || st.DenyCacheEvictions == 0 {
			t.Fatalf("%+v, want at most 32 entries and evictions counted", st)
		}
	})
}

// TestDenyCacheSameCounterTwice: a request that names one counter twice
// is decided hit by hit on that counter, so its later hit sees the units
// the earlier one would take; when the request is refused those units
// were never taken. The later hit's "nothing left" is not the counter's,
// and the cache must not deny on it what the store allows.
func TestDenyCacheSameCounterTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := fakeClockMem(t)
		l := limiter.New(&testStore{inner: mem}, limiter.Options{})
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.TokenBucket, floodgate.SlidingLog} {
			lim := floodgate.Limit{Name: alg.String(), Algorithm: alg, Max: 3, Window: time.Hour}
			if alg.Family() == floodgate.FamilyRate {
				lim = floodgate.Limit{Name: alg.String(), Algorithm: alg, Rate: 1, Per: time.Hour, Burst: 3}
			}
			r := ruletest.Rule(t, lim)
			one := limiter.Hit{Rule: r, Key: "k", Cost: 1}
			two := limiter.Hit{Rule: r, Key: "k", Cost: 2}
			if res := check(t, l, two); !res.Allowed {
				t.Fatalf("%s: the first 2 of 3: %+v", alg, res)
			}
			// The last unit asked for twice in one request: refused,
			// nothing taken.
			if res := check(t, l, one, one); res.Allowed {
				t.Fatalf("%s: 2 units with 1 left: %+v", alg, res)
			}
			if d := peekStore(t, mem, one); !d.Allowed {
				t.Fatalf("%s: the store after the refusal: %+v, want the last unit left", alg, d)
			}
			if res := check(t, l, one); !res.Allowed {
				t.Fatalf("%s: the last unit, which the store holds: %+v", alg, res)
			}
		}
	})
}
