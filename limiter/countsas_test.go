package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestCountsAsOnlyAQuotaOfAnotherSize: a rule counts in another rule's
// counters (its ID) only when both are quotas whose limits differ in their
// size alone; any other difference (a period, a zone, an offset, an
// algorithm) would read a count that means something else, and is
// refused.
func TestCountsAsOnlyAQuotaOfAnotherSize(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	base := floodgate.Limit{Name: "basic.quota", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day, Location: ny}
	plan := ruletest.Rule(t, base)
	own := base
	own.Max = 5000
	r, err := limiter.NewRuleWith(own, limiter.RuleOptions{CountsAs: plan})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID() != plan.ID() || r.Params().Capacity() != 5000 {
		t.Errorf("own quota: ID %s capacity %d, want %s and 5000", r.ID(), r.Params().Capacity(), plan.ID())
	}
	for _, c := range []struct {
		what string
		edit func(l *floodgate.Limit)
	}{
		{"another period", func(l *floodgate.Limit) { l.Period = floodgate.Month }},
		{"another zone", func(l *floodgate.Limit) { l.Location = time.UTC }},
		{"an offset", func(l *floodgate.Limit) { l.Offset, l.Start = 10, time.Date(2026, 1, 1, 0, 0, 0, 0, ny) }},
		{"a window", func(l *floodgate.Limit) {
			*l = floodgate.Limit{Name: l.Name, Algorithm: floodgate.FixedWindow, Max: 1000, Window: 24 * time.Hour}
		}},
	} {
		l := base
		c.edit(&l)
		if _, err := limiter.NewRuleWith(l, limiter.RuleOptions{CountsAs: plan}); !errors.Is(err, floodgate.ErrInvalidLimit) {
			t.Errorf("%s: %v, want ErrInvalidLimit", c.what, err)
		}
	}
	// A rule cannot count as a rate either.
	tb := ruletest.Rule(t, floodgate.Limit{Name: "basic.rate", Algorithm: floodgate.TokenBucket, Rate: 2, Per: time.Second, Burst: 2})
	if _, err := limiter.NewRuleWith(floodgate.Limit{Name: "basic.rate", Algorithm: floodgate.TokenBucket, Rate: 4, Per: time.Second, Burst: 2},
		limiter.RuleOptions{CountsAs: tb}); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("a token bucket counting as another: %v, want ErrInvalidLimit", err)
	}
}
