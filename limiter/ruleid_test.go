package limiter_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// goldenRuleLimits are limits of every algorithm, with every parameter
// its algorithm takes set in one of them, whose rule IDs are held in
// TestRuleIDsStable.
func goldenRuleLimits(t *testing.T) []floodgate.Limit {
	t.Helper()
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 15, 0, 0, 0, 0, kolkata)
	return []floodgate.Limit{
		{Name: "per-ip", Algorithm: floodgate.TokenBucket, Rate: 5, Per: time.Second, Burst: 5},
		{Name: "login", Algorithm: floodgate.TokenBucket, Rate: 3, Per: time.Minute, Burst: 10},
		{Algorithm: floodgate.TokenBucket, Rate: 20, Per: time.Minute, Burst: 20},
		{Name: "unknown-api-key", Algorithm: floodgate.TokenBucket, Rate: 20, Per: time.Minute, Burst: 20},
		{Name: "partner.rate", Algorithm: floodgate.GCRA, Rate: 100, Per: time.Second, Burst: 200},
		{Name: "meter", Algorithm: floodgate.LeakyBucket, Rate: 1, Per: 500 * time.Millisecond, Burst: 1},
		{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 10, Per: time.Second, Burst: 20},
		{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 10, Per: time.Second, Burst: 20, Delay: 5},
		{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 10, Per: time.Second, Burst: 0, Delay: floodgate.NoDelay},
		{Name: "window", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute},
		{Name: "compat.second", Algorithm: floodgate.FixedWindow, Max: 1 << 50, Window: time.Second},
		{Name: "log", Algorithm: floodgate.SlidingLog, Max: 5, Window: 15 * time.Minute},
		{Name: "sliding", Algorithm: floodgate.SlidingWindow, Max: 1000, Window: time.Hour},
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Max: 8},
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Max: 8, LeaseTTL: 30 * time.Second},
		{Name: "daily", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day},
		{Name: "daily", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day, Location: time.UTC},
		{Name: "weekly", Algorithm: floodgate.Quota, Max: 5000, Period: floodgate.Week, Location: berlin},
		{Name: "partner.quota", Algorithm: floodgate.Quota, Max: 100, Period: floodgate.Month, Location: kolkata,
			AnchorDay: 15, Offset: 40, Start: start},
	}
}

// TestRuleIDsStable holds the rule IDs of goldenRuleLimits: they name the
// counters in the stores, so a change of how IDs are made would start
// every limit afresh on an upgrade, and instances of two versions sharing
// a store would count apart.
func TestRuleIDsStable(t *testing.T) {
	want := []string{
		"per-ip.8awjv4yk", "login.77j9jvyj", "token_bucket.5nnfkgl5", "unknown-api-key.5nnfkgl5",
		"partner.rate.1f1x002i", "meter.c2yuvndi", "queue.b6d1rgu6", "queue.975ti00d", "queue.d4ebrmam",
		"window.8m10ry56", "compat.second.9d97f6w", "log.53jjglfw", "sliding.6qf1hl6r",
		"in-flight.4gdmoa5o", "in-flight.ap4uq70l", "daily.3a69t0rh", "daily.a9lzka53", "weekly.k6s2ieb",
		"partner.quota.4uqgaegh",
	}
	limits := goldenRuleLimits(t)
	if len(want) != len(limits) {
		t.Fatalf("%d golden IDs for %d limits", len(want), len(limits))
	}
	seen := map[floodgate.Algorithm]bool{}
	for i, l := range limits {
		seen[l.Algorithm] = true
		r := ruletest.With(t, l, limiter.RuleOptions{OnFailure: floodgate.FailLocal})
		if r.ID() != want[i] {
			t.Errorf("%s (%s): ID %q, want %q", l.Name, l.Describe(), r.ID(), want[i])
		}
	}
	for _, a := range floodgate.Algorithms() {
		if !seen[a] {
			t.Errorf("no golden rule ID for %s", a)
		}
	}
}

// TestIDHash: a rule's IDHash is HashID of its ID, so rules of one limit
// hash alike and a store can hash an ID it read back (a placeholder for a
// reservation's rule, a state file) to the same value; different IDs
// differ, and the zero rule's empty ID hashes to 0.
func TestIDHash(t *testing.T) {
	l := floodgate.Limit{Name: "h", Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 5}
	a, b := ruletest.Rule(t, l), ruletest.Rule(t, l)
	l.Burst = 6
	c := ruletest.Rule(t, l)
	if a.IDHash() != b.IDHash() || a.IDHash() != limiter.HashID(a.ID()) {
		t.Fatalf("one limit: %x, %x, HashID %x", a.IDHash(), b.IDHash(), limiter.HashID(a.ID()))
	}
	if a.IDHash() == c.IDHash() {
		t.Fatalf("%s and %s: both %x", a.ID(), c.ID(), a.IDHash())
	}
	if p := limiter.PlaceholderRule(a.ID()); p.IDHash() != a.IDHash() {
		t.Fatalf("placeholder: %x, rule %x", p.IDHash(), a.IDHash())
	}
	if h := new(limiter.Rule).IDHash(); h != 0 || limiter.HashID("") != 0 {
		t.Fatalf("zero rule: %x, HashID(\"\") %x", h, limiter.HashID(""))
	}
}
