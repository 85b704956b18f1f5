package policy

import (
	"testing"

	"github.com/floodgate/floodgate"
)

// TestKeyOwnRateKeepsThePlanSettings: a key made through the admin API
// with a rate, burst or quota of its own gets a limit of its own, and that
// limit keeps the plan's consistency, failure policy and shadow mode.
// Before, it was made exact (and with the plan's failure policy and
// shadow mode), so a plan set to `consistency: leased` asked the store at
// every request of each such key.
func TestKeyOwnRateKeepsThePlanSettings(t *testing.T) {
	p := compile(t, `
routes:
  - {name: a, match: {paths: ["/a"]}, upstream: none}
plans:
  - {name: hot, rate: 1000, quota: {limit: 100000, period: DAY}, consistency: leased, on_failure: deny}
`)
	k, err := p.NewKey("acme", "hot", KeyOptions{Rate: 2000, Burst: 50, Quota: 5000})
	if err != nil {
		t.Fatal(err)
	}
	rate, quota := k.Limits()
	if got := rate.Rule.Limit(); got.Rate != 2000 || got.Burst != 50 {
		t.Fatalf("the key's rate %+v, want 2000 and a burst of 50", got)
	}
	if rate.Rule.Consistency() != floodgate.Leased {
		t.Errorf("the key's own rate is %v, want leased as its plan's", rate.Rule.Consistency())
	}
	if rate.Rule.OnFailure() != floodgate.FailClosed || quota.Rule.OnFailure() != floodgate.FailClosed {
		t.Errorf("failure policies %v and %v, want the plan's (deny)", rate.Rule.OnFailure(), quota.Rule.OnFailure())
	}
	plan, _ := p.Limit("hot.quota")
	if quota.Rule.Consistency() != plan.Rule.Consistency() {
		t.Errorf("the key's own quota is %v, the plan's %v", quota.Rule.Consistency(), plan.Rule.Consistency())
	}
	// The same options make the same counter: the same rule ID, so that
	// the key's rebuilt rules share its lease (limiter keys leases by it).
	k2, err := p.NewKey("acme", "hot", KeyOptions{Rate: 2000, Burst: 50, Quota: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if r2, _ := k2.Limits(); r2.Rule.ID() != rate.Rule.ID() {
		t.Errorf("the same key made twice: rule IDs %q and %q", rate.Rule.ID(), r2.Rule.ID())
	}
}
