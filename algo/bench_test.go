package algo

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate/floodgate"
)

// The benchmarks replay a steady overload (one arrival every step ns, about
// twice the limit's rate) so that both allows and denials are measured, and
// a sliding log or concurrency limit holds its full set of entries.
const benchStep = int64(5 * time.Millisecond)

func benchDecide(b *testing.B, l floodgate.Limit) {
	p := mustCompile(b, l)
	var s State
	now := int64(1_700_000_000) * int64(time.Second)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now += benchStep
		if _, err := p.Decide(&s, Request{Now: now, Cost: 1, Lease: uint64(i + 1)}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	for _, l := range []floodgate.Limit{
		{Name: "token_bucket", Algorithm: floodgate.TokenBucket, Rate: 100, Per: time.Second, Burst: 50},
		{Name: "gcra", Algorithm: floodgate.GCRA, Rate: 100, Per: time.Second, Burst: 50},
		{Name: "leaky_bucket", Algorithm: floodgate.LeakyBucket, Rate: 100, Per: time.Second, Burst: 50},
		{Name: "leaky_queue", Algorithm: floodgate.LeakyQueue, Rate: 100, Per: time.Second, Burst: 50, Delay: 10},
		{Name: "fixed_window", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Second},
		{Name: "sliding_log", Algorithm: floodgate.SlidingLog, Max: 100, Window: time.Second},
		{Name: "sliding_window", Algorithm: floodgate.SlidingWindow, Max: 100, Window: time.Second},
		{Name: "concurrency", Algorithm: floodgate.Concurrency, Max: 100, LeaseTTL: time.Second},
		{Name: "quota", Algorithm: floodgate.Quota, Max: 100_000, Period: floodgate.Day},
	} {
		b.Run(l.Name, func(b *testing.B) { benchDecide(b, l) })
	}
	b.Run("token_bucket_cost3", func(b *testing.B) {
		p := mustCompile(b, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 300, Per: time.Second, Burst: 50})
		var s State
		now := int64(1_700_000_000) * int64(time.Second)
		b.ReportAllocs()
		for b.Loop() {
			now += benchStep
			p.Decide(&s, Request{Now: now, Cost: 3})
		}
	})
	// The reference: x/time/rate's AllowN on the same trace.
	b.Run("x_time_rate_AllowN", func(b *testing.B) {
		lim := rate.NewLimiter(100, 50)
		now := time.Unix(1_700_000_000, 0)
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Duration(benchStep))
			lim.AllowN(now, 1)
		}
	})
}
