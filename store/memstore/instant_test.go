package memstore_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestDecisionInstant: every decision says the instant the store decided
// at, on the one-hit path, in place, with several hits and on a peek;
// an instant earlier than a key's state is reported as read.
func TestDecisionInstant(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixNano()
	s, err := memstore.New(memstore.Options{Now: func() int64 { return now }, SnapshotInterval: -1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tb := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 5})
	win := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 5, Window: time.Second})
	for i, step := range []struct {
		peek bool
		hits []limiter.Hit
	}{
		{false, []limiter.Hit{{Rule: tb, Key: "a", Cost: 1}}},                                 // new key
		{false, []limiter.Hit{{Rule: tb, Key: "a", Cost: 1}}},                                 // in place
		{false, []limiter.Hit{{Rule: win, Key: "a", Cost: 1}}},                                // copied state
		{true, []limiter.Hit{{Rule: tb, Key: "a", Cost: 1}}},                                  // peek
		{false, []limiter.Hit{{Rule: tb, Key: "b", Cost: 1}, {Rule: win, Key: "b", Cost: 1}}}, // several
	} {
		now += int64(time.Millisecond)
		for j, d := range decide(t, s, step.peek, step.hits...) {
			if d.At != now {
				t.Errorf("step %d hit %d: At %d, want %d", i, j, d.At, now)
			}
		}
	}
}
