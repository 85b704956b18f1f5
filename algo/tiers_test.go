package algo

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func mustTiers(t testing.TB, reserve ...float64) Tiers {
	t.Helper()
	ts, err := NewTiers(reserve...)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// randomReserves returns 1 to 5 shares that leave something to the lowest
// tier, the lowest reserving nothing.
func randomReserves(rng *rand.Rand) []float64 {
	r := make([]float64, 1+rng.IntN(5))
	left := 0.95
	for i := range len(r) - 1 {
		switch rng.IntN(4) {
		case 0: // nothing
		case 1:
			r[i] = math.Round(rng.Float64()*left*100) / 100
		default:
			r[i] = rng.Float64() * left / 2
		}
		left -= r[i]
	}
	return r
}

// The three properties of the rule, on random reserves, capacities (fixed
// and changing) and random arrivals and departures of every tier, checked
// against the shares as real numbers, not against Ceiling:
//
//   - a tier never takes capacity reserved for a tier above it: after an
//     admission of tier t that found a request in flight, what is free
//     covers C · (the reserves above t) (one that found none may take the
//     last place: no ceiling is below 1);
//   - the lowest tier is shed first: whenever a tier is refused, every
//     tier below it is refused too;
//   - with a fixed capacity, a tier is admitted while the tiers at and
//     above it hold less than its own reserve (C · reserve(t), less one
//     for rounding); the most critical tier exactly while its own requests
//     hold less than its reserve.
func TestTiersProperties(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 5))
	for c := range 400 {
		reserve := randomReserves(rng)
		ts := mustTiers(t, reserve...)
		n := len(reserve)
		capacity := rng.IntN(300)
		if rng.IntN(10) == 0 {
			capacity = rng.IntN(1 << 40)
		}
		fixed := rng.IntN(2) == 0
		inflight := make([]int, n)
		total := 0
		above := func(tier int) float64 { // the reserves above tier
			s := 0.0
			for _, r := range reserve[:tier] {
				s += r
			}
			return s
		}
		for step := range 2000 {
			if !fixed && rng.IntN(50) == 0 {
				capacity = rng.IntN(300)
			}
			// Shed first: refusals are closed downward.
			for tier := range n - 1 {
				if !ts.Admit(tier, capacity, total) && ts.Admit(tier+1, capacity, total) {
					t.Fatalf("case %d step %d: tier %d refused but tier %d admitted (reserves %v, capacity %d, in flight %d)",
						c, step, tier, tier+1, reserve, capacity, total)
				}
			}
			if fixed {
				for tier := range n {
					held := 0
					for _, k := range inflight[:tier+1] {
						held += k
					}
					slack := 1.0
					if tier == 0 {
						slack = 0
					}
					if float64(held) < float64(capacity)*(reserve[tier]-1e-6)-slack && !ts.Admit(tier, capacity, total) {
						t.Fatalf("case %d step %d: tier %d refused while tiers 0..%d hold %d of its reserve %v·%d (reserves %v, in flight %v)",
							c, step, tier, tier, held, reserve[tier], capacity, reserve, inflight)
					}
				}
			}
			if total > 0 && rng.IntN(2) == 0 {
				// A departure, of a request picked at random.
				k := rng.IntN(total)
				for tier := range n {
					if k < inflight[tier] {
						inflight[tier]--
						break
					}
					k -= inflight[tier]
				}
				total--
				continue
			}
			tier := rng.IntN(n + 1) // n: out of range, the lowest
			if rng.IntN(20) == 0 {
				tier = -1 - rng.IntN(3)
			}
			if !ts.Admit(tier, capacity, total) {
				continue
			}
			eff := tier
			if eff < 0 || eff >= n {
				eff = n - 1
			}
			inflight[eff]++
			total++
			if free := float64(capacity - total); total > 1 && free < float64(capacity)*(above(eff)-1e-6)-1e-9 {
				t.Fatalf("case %d step %d: tier %d admitted leaving %v free, below the %v·%d reserved above it",
					c, step, eff, free, above(eff), capacity)
			}
		}
	}
}

// simTiers offers a fixed capacity requests of each tier in Poisson
// arrivals at rate[t] per second, each holding its slot for an exponential
// 10ms, for the given simulated time; it returns the refusals by tier.
func simTiers(ts Tiers, capacity int, rate []float64, d time.Duration, seed uint64) (offered, refused []int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var done []int64 // departures, a min-heap
	push := func(x int64) {
		done = append(done, x)
		for i := len(done) - 1; i > 0 && done[(i-1)/2] > done[i]; i = (i - 1) / 2 {
			done[(i-1)/2], done[i] = done[i], done[(i-1)/2]
		}
	}
	pop := func() {
		last := len(done) - 1
		done[0] = done[last]
		done = done[:last]
		for i := 0; ; {
			l, m := 2*i+1, i
			if l < last && done[l] < done[m] {
				m = l
			}
			if l+1 < last && done[l+1] < done[m] {
				m = l + 1
			}
			if m == i {
				break
			}
			done[m], done[i] = done[i], done[m]
			i = m
		}
	}
	total := 0.0
	for _, r := range rate {
		total += r
	}
	offered, refused = make([]int, len(rate)), make([]int, len(rate))
	now := int64(0)
	for now < int64(d) {
		now += 1 + int64(rng.ExpFloat64()/total*1e9)
		for len(done) > 0 && done[0] <= now {
			pop()
		}
		u, tier := rng.Float64()*total, 0
		for tier < len(rate)-1 && u >= rate[tier] {
			u -= rate[tier]
			tier++
		}
		offered[tier]++
		if !ts.Admit(tier, capacity, len(done)) {
			refused[tier]++
			continue
		}
		push(now + 1 + int64(rng.ExpFloat64()*1e7))
	}
	return offered, refused
}

// With the offered load at 2.3 times the capacity and all tiers mixed,
// every refusal falls in the lowest tier that has traffic, provided the
// tiers above it fit in their reserves (critical 8 in flight on average
// against a reserve of 15; critical and default 23 against 45). Without
// sheddable traffic, default is the lowest tier with traffic and takes the
// refusals alone.
func TestTiersLowestShedFirst(t *testing.T) {
	t.Parallel()
	ts := mustTiers(t, 0.15, 0.45, 0)
	for _, tc := range []struct {
		name   string
		rate   []float64 // per second; each request holds 10ms
		lowest int
	}{
		{"all tiers", []float64{800, 1500, 20000}, 2},
		{"no sheddable", []float64{800, 22000, 0}, 1},
	} {
		offered, refused := simTiers(ts, 100, tc.rate, 20*time.Second, 9)
		for tier := range tc.lowest {
			if refused[tier] != 0 {
				t.Errorf("%s: %d of %d requests of tier %d refused, want none (refusals by tier %v)", tc.name, refused[tier], offered[tier], tier, refused)
			}
		}
		if refused[tc.lowest] == 0 {
			t.Errorf("%s: nothing refused in tier %d at 2.3 times the capacity", tc.name, tc.lowest)
		}
		t.Logf("%s: offered %v, refused %v", tc.name, offered, refused)
	}
}

// With the adaptive limit as the capacity, in front of the simulated
// upstream (best limit 100) at twice and three times its capacity:
// critical requests (5% of the traffic) succeed at least 99.9% of the time,
// every refusal falls in the lowest tier, and goodput stays above 90% of
// the capacity: the limit grows past the knee by the share the reserves
// keep idle (Refused tells it that it binds), so the upstream stays busy.
func TestTiersWithAdaptive(t *testing.T) {
	t.Parallel()
	for _, load := range []float64{2, 3} {
		a := newAdaptive(t, AdaptiveOptions{Initial: 100})
		s := newSim(4, a, 100, simService, load)
		s.withTiers(mustTiers(t, 0.2, 0.4, 0), 0.05, 0.15, 0.80)
		runSim(t, s, 60*simSecond)
		crit := 1 - float64(s.tierRefused[0])/float64(s.tierOffered[0])
		if crit < 0.999 {
			t.Errorf("load %v: critical requests admitted %.4f of the time, want 0.999 or more", load, crit)
		}
		if s.tierRefused[1] != 0 {
			t.Errorf("load %v: %d default requests refused, want none", load, s.tierRefused[1])
		}
		goodput := float64(s.served) / 60 / (100 / simService.Seconds())
		if goodput < 0.9 {
			t.Errorf("load %v: goodput %.3f of the capacity, want 0.9 or more", load, goodput)
		}
		lo, hi := s.between(10*simSecond, 60*simSecond)
		t.Logf("load %v: offered %v, refused %v, critical admitted %.4f, goodput %.3f, limit in [%d, %d]",
			load, s.tierOffered, s.tierRefused, crit, goodput, lo, hi)
	}
}

func TestTiersCeilings(t *testing.T) {
	ts := mustTiers(t, 0.2, 0.3, 0)
	for _, tc := range []struct{ tier, capacity, want int }{
		{0, 100, 100}, {1, 100, 80}, {2, 100, 50},
		{1, 7, 5}, {2, 7, 3}, // reserves round up: ⌈1.4⌉, ⌈3.5⌉
		{2, 1, 1}, {1, 1, 1}, {0, 1, 1}, // a capacity of 1 admits any tier when nothing is in flight
		{3, 100, 50}, {-1, 100, 50}, // out of range: the lowest
		{0, 0, 0}, {0, -5, 0},
		{2, math.MaxInt, math.MaxInt - (math.MaxInt/2 + 1)},
	} {
		if got := ts.Ceiling(tc.tier, tc.capacity); got != tc.want {
			t.Errorf("Ceiling(%d, %d) = %d, want %d", tc.tier, tc.capacity, got, tc.want)
		}
	}
	var zero Tiers
	if zero.Len() != 1 || zero.Ceiling(0, 10) != 10 || !zero.Admit(5, 10, 9) || zero.Admit(0, 10, 10) {
		t.Error("the zero Tiers is not one tier that reserves nothing")
	}
	if ts.Len() != 3 {
		t.Errorf("Len %d", ts.Len())
	}
}

func TestTiersErrors(t *testing.T) {
	for _, r := range [][]float64{
		{-0.1, 0}, {1.5, 0}, {math.NaN(), 0}, {math.Inf(1), 0},
		{0.2, 0.1}, // the lowest tier reserves
		{0.5, 0.5, 0}, {0.7, 0.2999999, 0}, {1, 0},
	} {
		_, err := NewTiers(r...)
		if !errors.Is(err, floodgate.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "algo: tiers: ") {
			t.Errorf("%v: %v", r, err)
		}
	}
	if _, err := NewTiers(0.5, 0.49, 0); err != nil {
		t.Errorf("reserves leaving 1%%: %v", err)
	}
}

func BenchmarkTiersAdmit(b *testing.B) {
	ts, _ := NewTiers(0.2, 0.3, 0)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		if ts.Admit(i%3, 1000, i%1000) {
			i++
		}
	}
}
