package redisstore

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestCountsAtMaxCountStayExact: the scripts count in Lua's doubles, which
// stop growing by one past 2^53. A counting limit of MaxCount is decided
// exactly to its last unit, as package algo decides it; one above
// MaxCount is decided as one of MaxCount, never past its limit: before, a
// limit of 2^53+2 with 2^53 used admitted every later request.
func TestCountsAtMaxCountStayExact(t *testing.T) {
	s := newStandalone(t)
	ctx := context.Background()
	for _, max := range []int64{MaxCount, MaxCount + 3, math.MaxInt64} {
		for _, l := range []floodgate.Limit{
			{Name: "fixed", Algorithm: floodgate.FixedWindow, Max: max, Window: time.Hour},
			{Name: "counter", Algorithm: floodgate.SlidingWindow, Max: max, Window: time.Hour},
			{Name: "quota", Algorithm: floodgate.Quota, Max: max, Period: floodgate.Day},
			{Name: "log", Algorithm: floodgate.SlidingLog, Max: max, Window: time.Hour},
			{Name: "conc", Algorithm: floodgate.Concurrency, Max: max, LeaseTTL: time.Hour},
		} {
			t.Run(fmt.Sprint(l.Name, "/", max), func(t *testing.T) {
				r := ruletest.Rule(t, l)
				now := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC).UnixMicro()
				s.testNow.Store(now)
				out := make([]floodgate.Decision, 1)
				if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "big", Cost: MaxCount - 2}}, false, out); err != nil || !out[0].Allowed {
					t.Fatalf("first charge of 2^53-3: %+v %v", out[0], err)
				}
				allowed := 0
				for i := range 6 {
					s.testNow.Store(now + int64(i+1))
					if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "big", Cost: 1, Lease: uint64(i + 1)}}, false, out); err != nil {
						t.Fatal(err)
					}
					if out[0].Allowed {
						allowed++
					}
				}
				if allowed != 2 {
					t.Errorf("a limit of %d with 2^53-3 used: %d of 6 unit requests allowed, want 2 (counted exactly to 2^53-1; last %+v)", max, allowed, out[0])
				}
			})
		}
	}
	big := floodgate.Limit{Name: "bytes", Algorithm: floodgate.Quota, Max: MaxCount + 1, Period: floodgate.Month}
	if CheckLimit(&big) == nil {
		t.Error("CheckLimit passes a quota of 2^53")
	}
	ok := floodgate.Limit{Name: "bucket", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 1 << 60}
	if err := CheckLimit(&ok); err != nil {
		t.Errorf("CheckLimit refuses a token bucket: %v", err)
	}
}
