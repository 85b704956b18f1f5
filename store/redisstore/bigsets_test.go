package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestLogsAndLeasesOfMoreThan8000Entries: a sliding log of 9,000 an hour
// and a concurrency limit of 9,000 leases, each filled, deny the next
// request with its wait, and once every entry has passed take the next
// one. The script handed all the live entries (a denial) or all those
// that had passed (the next charge) to Redis in one Lua unpack, which
// Lua's C stack refuses past about 8,000: each such request failed with
// "too many results to unpack", so a full log or limit let its failure
// policy answer instead of denying, and a log whose burst had passed
// failed every request until its newer entries had passed too.
func TestLogsAndLeasesOfMoreThan8000Entries(t *testing.T) {
	s := newStandalone(t)
	ctx := context.Background()
	const n = 9000
	t0 := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC).UnixMicro()
	for _, c := range []struct {
		l    floodgate.Limit
		wait time.Duration // of the request beyond the limit
	}{
		// The oldest entry, charged at t0, passes an hour later.
		{floodgate.Limit{Name: "log", Algorithm: floodgate.SlidingLog, Max: n, Window: time.Hour}, time.Hour - (n+10)*time.Microsecond},
		// A concurrency limit's wait is at most a second (a lease may
		// come back at any time).
		{floodgate.Limit{Name: "conc", Algorithm: floodgate.Concurrency, Max: n, LeaseTTL: time.Hour}, time.Second},
	} {
		l := c.l
		t.Run(l.Name, func(t *testing.T) {
			r := ruletest.Rule(t, l)
			out := make([]floodgate.Decision, 1)
			decide := func(at int64, lease uint64) error {
				s.testNow.Store(at)
				return s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "full", Cost: 1, Lease: lease}}, false, out)
			}
			for i := range n {
				if err := decide(t0+int64(i), uint64(i+1)); err != nil || !out[0].Allowed {
					t.Fatalf("charge %d: %+v %v", i, out[0], err)
				}
			}
			if err := decide(t0+n+10, n+1); err != nil || out[0].Allowed || out[0].RetryAfter != c.wait {
				t.Errorf("a request beyond %d entries: %+v %v, want denied for %v", n, out[0], err, c.wait)
			}
			if err := decide(t0+(time.Hour+time.Second).Microseconds(), n+2); err != nil || !out[0].Allowed || out[0].Remaining != n-1 {
				t.Errorf("a request once %d entries passed: %+v %v, want allowed with %d left", n, out[0], err, n-1)
			}
		})
	}
}
