package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// BenchmarkApply measures one-hit decisions against the shared standalone
// server from parallel goroutines (rueidis pipelines them automatically).
func BenchmarkApply(b *testing.B) {
	for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			s := newStandalone(b)
			r, err := limiter.NewRule(floodgate.Limit{Name: "bench", Algorithm: alg, Rate: 100, Per: time.Second,
				Burst: 100, Max: 100, Window: time.Second}, floodgate.FailOpen, false)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "k" + strconv.Itoa(i)
			}
			var seq atomic.Uint64
			b.SetParallelism(25) // 50 goroutines on 2 CPUs, like floodgate bench
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				hits := []limiter.Hit{{Rule: r, Cost: 1}}
				out := make([]floodgate.Decision, 1)
				i := seq.Add(7919)
				ctx := context.Background()
				for pb.Next() {
					i++
					hits[0].Key = keys[i%uint64(len(keys))]
					if err := s.Apply(ctx, limiter.Charge, hits, out); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkApplyThreeLimits is one request with three limits in one slot.
func BenchmarkApplyThreeLimits(b *testing.B) {
	s := newStandalone(b)
	var rules []*limiter.Rule
	for _, name := range []string{"a", "b", "c"} {
		r, err := limiter.NewRule(floodgate.Limit{Name: name, Algorithm: floodgate.TokenBucket, Rate: 100, Per: time.Second, Burst: 100}, floodgate.FailOpen, false)
		if err != nil {
			b.Fatal(err)
		}
		rules = append(rules, r)
	}
	b.SetParallelism(25)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		hits := []limiter.Hit{{Rule: rules[0], Key: "u", Cost: 1}, {Rule: rules[1], Key: "u", Cost: 1}, {Rule: rules[2], Key: "u", Cost: 1}}
		out := make([]floodgate.Decision, 3)
		for pb.Next() {
			if err := s.Apply(context.Background(), limiter.Charge, hits, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
