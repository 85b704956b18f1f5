package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// BenchmarkApply measures one-hit decisions against the shared standalone
// server from parallel goroutines (rueidis pipelines them automatically).
func BenchmarkApply(b *testing.B) {
	for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			s := newStandalone(b)
			r := ruletest.Rule(b, floodgate.Limit{Name: "bench", Algorithm: alg, Rate: 100, Per: time.Second,
				Burst: 100, Max: 100, Window: time.Second})
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
					if err := s.Decide(ctx, hits, false, out); err != nil {
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
		r := ruletest.Rule(b, floodgate.Limit{Name: name, Algorithm: floodgate.TokenBucket, Rate: 100, Per: time.Second, Burst: 100})
		rules = append(rules, r)
	}
	b.SetParallelism(25)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		hits := []limiter.Hit{{Rule: rules[0], Key: "u", Cost: 1}, {Rule: rules[1], Key: "u", Cost: 1}, {Rule: rules[2], Key: "u", Cost: 1}}
		out := make([]floodgate.Decision, 3)
		for pb.Next() {
			if err := s.Decide(context.Background(), hits, false, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// engineBench runs one request of two hits through the engine on the
// shared standalone server, serially (one caller: round trips) and from
// 50 goroutines (batched: Redis' work per request). The hits are a token
// bucket that never runs out and a window, on one subject of 1,000; do
// makes the request, with a Result of its goroutine.
func engineBench(b *testing.B, do func(l *limiter.Limiter, hits []limiter.Hit, r *limiter.Result) error) {
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			s := newStandalone(b)
			l := limiter.New(s, limiter.Options{})
			tb := ruletest.Rule(b, floodgate.Limit{Name: "tokens", Algorithm: floodgate.TokenBucket, Rate: 1 << 20,
				Per: time.Second, Burst: 1 << 30})
			w := ruletest.Rule(b, floodgate.Limit{Name: "requests", Algorithm: floodgate.FixedWindow, Max: 1 << 50,
				Window: time.Hour})
			var seq atomic.Uint64
			run := func(next func() bool) {
				i := seq.Add(7919)
				hits := make([]limiter.Hit, 2)
				var r limiter.Result
				for next() {
					i++
					k := "u" + strconv.Itoa(int(i%1000))
					hits[0] = limiter.Hit{Rule: tb, Key: k, Cost: 2}
					hits[1] = limiter.Hit{Rule: w, Key: k, Cost: 1}
					if err := do(l, hits, &r); err != nil {
						b.Error(err)
						return
					}
				}
			}
			b.ReportAllocs()
			before := scriptMicros(b, s)
			if mode == "serial" {
				run(b.Loop)
			} else {
				b.SetParallelism(25) // 50 goroutines on 2 CPUs, like floodgate bench
				b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
			}
			b.ReportMetric(float64(scriptMicros(b, s)-before)/float64(b.N), "redis-µs/op")
		})
	}
}

// scriptMicros returns the time Redis has spent running scripts (INFO
// commandstats), in µs: the server's share of a benchmark, apart from the
// client's and the network's.
func scriptMicros(b *testing.B, s *Store) int64 {
	var total int64
	for k, v := range benchInfo(b, s, "commandstats") {
		if !strings.HasPrefix(k, "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// benchInfo returns the name:value fields of an INFO section of s's
// server.
func benchInfo(b *testing.B, s *Store, section string) map[string]string {
	b.Helper()
	text, err := nodeClient{c: s.client}.info(context.Background(), section)
	if err != nil {
		b.Fatal(err)
	}
	return infoFields(text)
}

// BenchmarkEngineCheck is one plain decision of two limits through the
// engine on Redis: the unit of BenchmarkEngineReserveSettle.
func BenchmarkEngineCheck(b *testing.B) {
	engineBench(b, func(l *limiter.Limiter, hits []limiter.Hit, r *limiter.Result) error {
		req := limiter.Request{Hits: hits}
		if err := l.Decide(context.Background(), &req, r); err != nil {
			return err
		}
		if !r.Allowed || r.Degraded != limiter.NotDegraded {
			return fmt.Errorf("not allowed by the store: %+v", r)
		}
		return nil
	})
}

// BenchmarkEngineReserveSettle reserves the token bucket's cost with the
// window's (one request) and settles it below the estimate: the two calls
// of a request whose cost is known later. The goal is at most twice
// BenchmarkEngineCheck.
func BenchmarkEngineReserveSettle(b *testing.B) {
	actual := []int64{1, 0}
	engineBench(b, func(l *limiter.Limiter, hits []limiter.Hit, r *limiter.Result) error {
		hits[0].Reserve = true
		req := limiter.Request{Hits: hits}
		if err := l.Decide(context.Background(), &req, r); err != nil {
			return err
		}
		if !r.Allowed || r.Degraded != limiter.NotDegraded {
			return fmt.Errorf("not allowed by the store: %+v", r)
		}
		return l.Settle(context.Background(), &req, actual, r)
	})
}

// BenchmarkScriptBatch is apply.lua alone on batches of one-hit charges
// (a token bucket or a fixed window, 10,000 keys), sent back to back from
// one goroutine: redis-µs/hit is Redis' time per decision in a batch of
// that size, apart from the client's batching.
func BenchmarkScriptBatch(b *testing.B) {
	for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.FixedWindow} {
		for _, n := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/batch=%d", alg, n), func(b *testing.B) {
				s := newStandalone(b)
				r := ruletest.Rule(b, floodgate.Limit{Name: "bench", Algorithm: alg, Rate: 100, Per: time.Second,
					Burst: 100, Max: 100, Window: time.Second})
				hits := make([]limiter.Hit, 10000)
				for i := range hits {
					hits[i] = limiter.Hit{Rule: r, Key: "k" + strconv.Itoa(i), Cost: 1}
				}
				batch := make([]*request, n)
				i := 0
				ctx := context.Background()
				before, cpu0 := scriptMicros(b, s), serverCPU(b, s)
				for b.Loop() {
					for j := range batch {
						rq := getRequest()
						rq.idx = append(rq.idx[:0], i%len(hits))
						i += 7919
						s.prepare(opCharge, hits, rq, false)
						batch[j] = rq
					}
					s.exec(ctx, batch)
					for _, rq := range batch {
						if rq.err != nil {
							b.Fatal(rq.err)
						}
						putRequest(rq)
					}
				}
				b.ReportMetric(float64(scriptMicros(b, s)-before)/float64(b.N*n), "redis-µs/hit")
				b.ReportMetric((serverCPU(b, s)-cpu0)*1e6/float64(b.N*n), "redis-cpu-µs/hit")
			})
		}
	}
}

// serverCPU returns the CPU time the server's main thread has used
// (INFO cpu), in seconds.
func serverCPU(b *testing.B, s *Store) float64 {
	var total float64
	for k, v := range benchInfo(b, s, "cpu") {
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}
