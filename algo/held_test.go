package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// free returns the units a request could take from s at now.
func free(t *testing.T, p *Params, s *State, now int64) int64 {
	t.Helper()
	st := cloneState(*s)
	d, err := p.Decide(&st, Request{Now: now, Cost: 1, Peek: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// TestHeld checks Held against the decisions on random traces of every
// algorithm: it is 0 exactly when the state gives what a fresh key gives,
// and otherwise the share of those units the state holds (for the sliding
// log and concurrency at least that share).
func TestHeld(t *testing.T) {
	t.Parallel()
	steps := 3000
	if testing.Short() {
		steps = 600
	}
	for li, l := range propertyLimits(t) {
		t.Run(l.Name, func(t *testing.T) {
			p := mustCompile(t, l)
			rng := rand.New(rand.NewPCG(uint64(li), 11))
			now := time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC).UnixNano()
			var s State
			step := p.window + int64(p.per) + p.ttl
			if p.alg == floodgate.Quota {
				step = int64(3 * time.Hour)
			}
			lease := uint64(0)
			for i := range steps {
				switch {
				case rng.IntN(6) == 0:
					now += rng.Int64N(4 * step) // long enough to go back to fresh
				default:
					now += rng.Int64N(step/8 + 1)
				}
				if p.alg == floodgate.Concurrency && lease > 0 && rng.IntN(3) == 0 {
					if err := p.Release(&s, now, uint64(rng.Int64N(int64(lease)))+1); err != nil {
						t.Fatal(err)
					}
				} else {
					lease++
					if _, err := p.Decide(&s, Request{Now: now, Cost: rng.Int64N(max(p.cap/2, 1)) + 1, Lease: lease}); err != nil {
						t.Fatal(err)
					}
				}
				at := now + rng.Int64N(step/4+1)
				var fresh State
				whole := free(t, &p, &fresh, at)
				used := whole - free(t, &p, &s, at)
				held := p.Held(&s, at)
				if (held == 0) != (used == 0) {
					t.Fatalf("step %d: Held %d with %d of %d units used", i, held, used, whole)
				}
				share := float64(held) / HeldFull * float64(whole)
				slack := float64(whole) / HeldFull
				lower, upper := float64(used), float64(used)+slack
				switch p.alg.Family() {
				case floodgate.FamilyRate:
					lower = float64(used) - 1 // a token partly refilled
				case floodgate.FamilyConcurrency:
					upper = float64(whole) + slack
				}
				if p.alg == floodgate.SlidingLog {
					upper = float64(whole) + slack
				}
				if share < lower || share > upper {
					t.Fatalf("step %d: Held %d is %.3f of %d units, want within [%.3f, %.3f] (%d used)", i, held, share, whole, lower, upper, used)
				}
			}
		})
	}
}

func TestHeldUncompiled(t *testing.T) {
	t.Parallel()
	var p Params
	if got := p.Held(&State{}, 1); got != HeldFull {
		t.Fatalf("zero Params: Held %d, want HeldFull", got)
	}
}

func BenchmarkHeld(b *testing.B) {
	p := mustCompile(b, floodgate.Limit{Algorithm: floodgate.SlidingWindow, Max: 100, Window: time.Minute})
	now := time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC).UnixNano()
	var s State
	for range 50 {
		if _, err := p.Decide(&s, Request{Now: now, Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var sink uint32
	for b.Loop() {
		sink += p.Held(&s, now+int64(time.Minute))
	}
	_ = sink
}
