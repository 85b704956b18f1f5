package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestLeaseOp: a lease takes want units when the key has them, else the
// request's cost, else nothing (with the decision a charge of the cost
// gives); what is given back returns to the key, for a fixed window only
// within the window it was taken in.
func TestLeaseOp(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			ctx := context.Background()
			at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixMicro()
			s.testNow.Store(at)
			for _, l := range []floodgate.Limit{
				{Name: "lease_tb", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 10},
				{Name: "lease_gcra", Algorithm: floodgate.GCRA, Rate: 3, Per: time.Minute, Burst: 10},
				{Name: "lease_fixed", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute},
			} {
				r, err := limiter.NewRuleWith(l, limiter.RuleOptions{Consistency: floodgate.Leased})
				if err != nil {
					t.Fatal(err)
				}
				h := limiter.Hit{Rule: r, Key: "lease", Cost: 2}
				peek := func() floodgate.Decision {
					out := make([]floodgate.Decision, 1)
					p := h
					p.Cost = 1
					if err := s.Decide(ctx, []limiter.Hit{p}, true, out); err != nil {
						t.Fatal(err)
					}
					return out[0]
				}
				lease := func(want int64, back limiter.Giveback) limiter.Grant {
					lh := h
					if want == 0 {
						lh.Cost = 0 // only give back
					}
					g, err := s.Lease(ctx, &lh, want, back)
					if err != nil {
						t.Fatalf("%s: lease %d: %v", l.Name, want, err)
					}
					return g
				}
				g := lease(6, limiter.Giveback{})
				if g.Units != 6 || !g.Decision.Allowed || g.Decision.Remaining != 4 || peek().Remaining != 3 {
					t.Fatalf("%s: want 6 of 10: %+v, peek %+v", l.Name, g, peek())
				}
				first := g.Mark
				// 4 left: 6 do not fit, the cost of 2 does.
				if g = lease(6, limiter.Giveback{}); g.Units != 2 || g.Decision.Remaining != 2 {
					t.Fatalf("%s: want 6 of 4: %+v, want the cost, 2", l.Name, g)
				}
				// 2 left: a cost of 3 does not fit, and is answered as a charge.
				h.Cost = 3
				g = lease(6, limiter.Giveback{})
				out := make([]floodgate.Decision, 1)
				if err := s.Decide(ctx, []limiter.Hit{h}, true, out); err != nil {
					t.Fatal(err)
				}
				if g.Units != 0 || g.Decision != out[0] {
					t.Fatalf("%s: nothing fits: %+v, want the charge's denial %+v", l.Name, g, out[0])
				}
				h.Cost = 2
				// Give back 5 of the first lease's 6.
				if g = lease(0, limiter.Giveback{Units: 5, Mark: first}); g.Units != 0 || peek().Remaining != 6 {
					t.Fatalf("%s: give back 5: %+v, peek %+v, want 7 left", l.Name, g, peek())
				}
				if l.Algorithm == floodgate.FixedWindow {
					// A window later, what the old window lent is not given back.
					s.testNow.Store(at + time.Minute.Microseconds())
					lease(10, limiter.Giveback{})
					if g = lease(0, limiter.Giveback{Units: 5, Mark: first}); peek().Allowed {
						t.Fatalf("fixed: a give-back from the previous window counted: %+v", peek())
					}
					s.testNow.Store(at)
				}
			}
		})
	}
}

// TestLeasedEngine: through the engine, a leased rule's requests are
// decided from leases, a request is still all or nothing, and what is left
// goes back to Redis.
func TestLeasedEngine(t *testing.T) {
	s := newStandalone(t)
	ctx := context.Background()
	r, err := limiter.NewRuleWith(floodgate.Limit{Name: "leng", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour,
		Burst: 1000}, limiter.RuleOptions{Consistency: floodgate.Leased, OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	other := ruletest.With(t, floodgate.Limit{Name: "leng_other", Algorithm: floodgate.FixedWindow, Max: 50,
		Window: 1000 * time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	l := limiter.New(s, limiter.Options{Timeout: 5 * time.Second, Lease: limiter.LeaseOptions{Lifetime: time.Hour}})
	hit := limiter.Hit{Rule: r, Key: "k", Cost: 1}
	for i := range 300 {
		if res, err := l.Check(ctx, []limiter.Hit{hit}); err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v %v", i, res, err)
		}
	}
	st := l.Stats()
	t.Logf("%+v", st)
	if st.LeaseTakes < 250 || st.LeaseGrants > 50 {
		t.Fatalf("%+v: want most decisions from leases", st)
	}
	// All or nothing: the exact hit denies after 50, and the leased units
	// those requests took go back into the lease.
	calls, _ := s.Calls()
	for i := range 60 {
		res, err := l.Check(ctx, []limiter.Hit{hit, {Rule: other, Key: "k", Cost: 1}})
		if err != nil || res.Allowed != (i < 50) {
			t.Fatalf("request %d with the exact hit: %+v %v", i, res, err)
		}
	}
	if err := l.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(ctx, []limiter.Hit{hit}, true, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 1000-350-1 {
		t.Fatalf("after returning the leases, Redis holds %+v, want 350 taken", out[0])
	}
	if now, _ := s.Calls(); now-calls > 70 {
		t.Fatalf("%d script calls", now-calls)
	}
}

// TestLeasedAcrossProcesses: 4 OS processes × 50 goroutines decide one
// hot leased key through their engines. A token bucket admits at most the
// exact bound over the run plus the stated over-admission, min(Rate·L,
// K·N); a fixed window admits at most its limit, and loses at most the
// units left in leases when the processes stop.
func TestLeasedAcrossProcesses(t *testing.T) {
	url := "redis://" + sharedServer(t).Addr
	k := int64(leasedProcs)
	t.Run("token_bucket", func(t *testing.T) {
		start := time.Now()
		reps := runHelpers(t, leasedProcs, "leased_tb", url, uniquePrefix(t), 0, helperDuration+"=1500ms")
		elapsed := time.Since(start)
		total := sumReports(reps)
		n := int64(leasedBurst) / (leasedShare * k)
		extra := min(int64(leasedRate*leasedLifetime/time.Second), k*n)
		exact := leasedBurst + int64(float64(leasedRate)*elapsed.Seconds())
		t.Logf("%+v in %v: exact bound %d, leased bound %d", total, elapsed, exact, exact+extra)
		if total.Errors != 0 {
			t.Fatalf("%d errors or degraded decisions", total.Errors)
		}
		if total.Allowed > exact+extra {
			t.Fatalf("allowed %d, above the leased bound %d + %d", total.Allowed, exact, extra)
		}
		// The burst is taken in leases; then the key is short of units
		// and requests take one unit each.
		if total.Allowed < leasedBurst || total.LeaseTakes < leasedBurst/2 {
			t.Fatalf("allowed %d, %d from leases: the test does not exercise leases", total.Allowed, total.LeaseTakes)
		}
	})
	t.Run("fixed_window", func(t *testing.T) {
		avoidHourBoundary()
		total := sumReports(runHelpers(t, leasedProcs, "leased_fixed", url, uniquePrefix(t), 10))
		n := int64(leasedMax) / (leasedShare * k)
		t.Logf("%+v", total)
		if total.Errors != 0 {
			t.Fatalf("%d errors or degraded decisions", total.Errors)
		}
		if total.Allowed > leasedMax || total.Allowed < leasedMax-k*n {
			t.Fatalf("allowed %d, want at most %d and at least %d", total.Allowed, leasedMax, leasedMax-k*n)
		}
		if total.LeaseTakes < uint64(total.Allowed)/2 {
			t.Fatalf("%d of %d from leases: the test does not exercise leases", total.LeaseTakes, total.Allowed)
		}
	})
}
