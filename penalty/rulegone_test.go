package penalty

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

// TestBansOfARuleGoneLapse: a reload that takes a rule away stops its
// bans from refusing anyone, as SetRules says; they are kept, and refuse
// again while they last if the rule comes back.
func TestBansOfARuleGoneLapse(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	box, err := New([]config.Ban{flood}, Options{Backend: NewMemory(0, clock), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	for range 3 {
		box.Outcome(context.Background(), "10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
	}
	if _, _, b := box.Banned("10.0.0.1", "", ""); !b {
		t.Fatal("not banned after 3 of 3")
	}
	box.SetRules(nil)
	if rule, _, b := box.Banned("10.0.0.1", "", ""); b {
		t.Fatalf("banned by %q after a reload took the rule away", rule)
	}
	box.SetRules([]config.Ban{flood})
	if _, _, b := box.Banned("10.0.0.1", "", ""); !b {
		t.Fatal("not banned once the rule came back, within its ban")
	}
}
