package limiter_test

import (
	"math/rand/v2"
	"testing"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// instance is one engine of several sharing one store, with its own local
// fallback store, whose link to the shared store can be broken on its own.
type instance struct {
	link     *testStore
	lim      *limiter.Limiter
	degraded bool // it decided by policy at least once
}

func instancesOn(t *testing.T, shared limiter.Store, n int) []*instance {
	t.Helper()
	out := make([]*instance, n)
	for i := range out {
		link := &testStore{inner: shared}
		// No deny cache: it would keep denying what the store last
		// denied, hiding the fallback.
		out[i] = &instance{link: link, lim: limiter.New(link, limiter.Options{Local: newMem(t), Instances: n,
			Breaker: limiter.BreakerOptions{Failures: -1}, DenyCache: limiter.DenyCacheOptions{Entries: -1}})}
	}
	return out
}

// decide sends one request of cost 1 through inst and reports whether it
// was admitted.
func (inst *instance) decide(t *testing.T, r *limiter.Rule) bool {
	t.Helper()
	res := check(t, inst.lim, limiter.Hit{Rule: r, Key: "k", Cost: 1})
	if res.Degraded != limiter.NotDegraded {
		inst.degraded = true
	}
	return res.Allowed
}

// overAdmitRules are limits of 100 that do not refill during a test.
func overAdmitRules(t *testing.T, policy floodgate.FailurePolicy) []*limiter.Rule {
	return []*limiter.Rule{
		ruletest.With(t, floodgate.Limit{Name: "fixed", Algorithm: floodgate.FixedWindow, Max: 100, Window: 1000 * hour}, limiter.RuleOptions{OnFailure: policy}),
		ruletest.With(t, floodgate.Limit{Name: "log", Algorithm: floodgate.SlidingLog, Max: 100, Window: 1000 * hour}, limiter.RuleOptions{OnFailure: policy}),
		ruletest.With(t, floodgate.Limit{Name: "bucket", Algorithm: floodgate.TokenBucket, Rate: 1, Per: 1000 * hour, Burst: 100}, limiter.RuleOptions{OnFailure: policy}),
	}
}

// TestLocalFallbackOverAdmissionBound holds the bound of the local failure
// policy stated in the package documentation: with N instances on one
// store and a limit L, the requests admitted over one window (one burst)
// are at most L (what the store admits) plus max(1, L/N) for each instance
// that decided by its local fallback, so at most 2L when all did, whatever
// the order of outages, and whether or not the store applied the calls
// whose answers were lost (those count in the store too, which only
// lowers what it admits). The deterministic case reaches the bound.
func TestLocalFallbackOverAdmissionBound(t *testing.T) {
	const limit, n = 100, 3
	share := int64(max(1, limit/n))
	for _, r := range overAdmitRules(t, floodgate.FailLocal) {
		t.Run(r.ID(), func(t *testing.T) {
			// The worst case: the store admits the whole limit, then
			// every instance loses it and admits its share.
			insts := instancesOn(t, newMem(t), n)
			admitted := int64(0)
			for i := range 3 * limit {
				if insts[i%n].decide(t, r) {
					admitted++
				}
			}
			if admitted != limit {
				t.Fatalf("healthy store: %d admitted, want %d", admitted, limit)
			}
			for _, inst := range insts {
				inst.link.fail.Store(true)
			}
			for i := range 3 * limit {
				if insts[i%n].decide(t, r) {
					admitted++
				}
			}
			if want := limit + n*share; admitted != want {
				t.Fatalf("every instance degraded after the store was full: %d admitted, want the bound %d", admitted, want)
			}

			// Outages in any order, with answers lost after the store
			// applied the call as well as calls that never reached it.
			for seed := range uint64(40) {
				rng := rand.New(rand.NewPCG(seed, 7))
				insts := instancesOn(t, newMem(t), n)
				admitted := int64(0)
				for range 6 * limit {
					inst := insts[rng.IntN(n)]
					if rng.IntN(8) == 0 {
						inst.link.fail.Store(false)
						inst.link.lose.Store(false)
						switch rng.IntN(3) {
						case 1:
							inst.link.fail.Store(true)
						case 2:
							inst.link.lose.Store(true)
						}
					}
					if inst.decide(t, r) {
						admitted++
					}
				}
				k := int64(0)
				for _, inst := range insts {
					if inst.degraded {
						k++
					}
				}
				if bound := limit + k*share; admitted > bound {
					t.Fatalf("seed %d: %d admitted with %d of %d instances degraded; the bound is %d", seed, admitted, k, n, bound)
				}
			}
		})
	}
}

// TestClosedFallbackNeverOverAdmits: the deny policy admits only what the
// store admitted, however the outages fall.
func TestClosedFallbackNeverOverAdmits(t *testing.T) {
	const limit, n = 100, 3
	for _, r := range overAdmitRules(t, floodgate.FailClosed) {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 9))
			insts := instancesOn(t, newMem(t), n)
			admitted := 0
			for range 6 * limit {
				inst := insts[rng.IntN(n)]
				if rng.IntN(8) == 0 {
					inst.link.fail.Store(rng.IntN(2) == 0)
					inst.link.lose.Store(!inst.link.fail.Load() && rng.IntN(2) == 0)
				}
				if inst.decide(t, r) {
					admitted++
				}
			}
			if admitted > limit {
				t.Fatalf("%s seed %d: %d admitted by the deny policy, limit %d", r.ID(), seed, admitted, limit)
			}
		}
	}
}
