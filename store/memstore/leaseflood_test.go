package memstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestLeasesSurviveFlood: a concurrency limit's leases in flight are not
// forgotten when a flood of new keys fills the store. Each flood key uses
// up its own limit in one charge (a fixed window of one unit), so it holds
// all of it; the concurrency key holds two of its three slots. Were the
// concurrency key evicted, its leases would be forgotten and more than
// three would run at once.
func TestLeasesSurviveFlood(t *testing.T) {
	t.Parallel()
	c := &clock{ns: 1000 * sec}
	const capKeys = 2_000
	s := newStore(t, memstore.Options{Shards: 1, MaxKeys: capKeys, Now: c.now, SweepInterval: -1})
	slots := ruletest.Rule(t, floodgate.Limit{Name: "slots", Algorithm: floodgate.Concurrency, Max: 3, LeaseTTL: time.Hour})
	one := windowRule(t, 1)
	for lease := uint64(1); lease <= 2; lease++ {
		if d := charge(t, s, limiter.Hit{Rule: slots, Key: "report", Cost: 1, Lease: lease})[0]; !d.Allowed {
			t.Fatalf("lease %d: %+v", lease, d)
		}
	}
	var buf []byte
	for i := range 4 * capKeys {
		buf = strconv.AppendInt(append(buf[:0], "k"...), int64(i), 10)
		if d := charge(t, s, limiter.Hit{Rule: one, Key: string(buf), Cost: 1})[0]; !d.Allowed {
			t.Fatalf("flood key %d: %+v", i, d)
		}
	}
	st := s.Stats()
	running := int64(2)
	for lease := uint64(3); lease <= 6; lease++ {
		if d := charge(t, s, limiter.Hit{Rule: slots, Key: "report", Cost: 1, Lease: lease})[0]; d.Allowed {
			running++
		}
	}
	if running > 3 {
		t.Fatalf("after a flood of %d keys, %d leases of a concurrency limit of 3 are held at once (stats %+v)", 4*capKeys, running, st)
	}
}
