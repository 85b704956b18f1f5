package memstore_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// benchKeys is the number of distinct keys the keyed benchmarks spread
// their decisions over.
const benchKeys = 10000

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// benchBucket returns an embedded store, closed with the benchmark, and
// the token bucket the keyed benchmarks charge: 1,000 a second, burst 100.
func benchBucket(b *testing.B) (*memstore.Store, *limiter.Rule) {
	b.Helper()
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, ruletest.Rule(b, floodgate.Limit{Name: "bench", Algorithm: floodgate.TokenBucket,
		Rate: 1000, Per: time.Second, Burst: 100})
}

// decideParallel charges one unit of r on s from parallel goroutines,
// spreading the decisions over keys; each goroutine starts at its own
// place, taken from seq.
func decideParallel(b *testing.B, s *memstore.Store, r *limiter.Rule, keys []string, seq *atomic.Uint64) {
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(7919))
		hits := []limiter.Hit{{Rule: r, Cost: 1}}
		out := make([]floodgate.Decision, 1)
		for pb.Next() {
			hits[0].Key = keys[i%len(keys)]
			i++
			if err := s.Decide(context.Background(), hits, false, out); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkKeyed compares keyed token-bucket decisions in memstore with
// the usual hand-made limiter: a map of x/time/rate limiters behind one
// mutex. Both spread decisions over the same keys from parallel goroutines
// and read the clock once per decision.
func BenchmarkKeyed(b *testing.B) {
	keys := keyNames(benchKeys)
	var seq atomic.Uint64

	b.Run("memstore", func(b *testing.B) {
		s, r := benchBucket(b)
		b.ReportAllocs()
		decideParallel(b, s, r, keys, &seq)
	})

	b.Run("engine+memstore", func(b *testing.B) {
		s, r := benchBucket(b)
		l := limiter.New(s, limiter.Options{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(7919))
			hits := []limiter.Hit{{Rule: r, Cost: 1}}
			req := limiter.Request{Hits: hits}
			var res limiter.Result
			for pb.Next() {
				hits[0].Key = keys[i%benchKeys]
				i++
				if err := l.Decide(context.Background(), &req, &res); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	b.Run("map+mutex+x-time-rate", func(b *testing.B) {
		var mu sync.Mutex
		limiters := make(map[string]*rate.Limiter)
		allow := func(key string) bool {
			mu.Lock()
			l, ok := limiters[key]
			if !ok {
				l = rate.NewLimiter(1000, 100)
				limiters[key] = l
			}
			mu.Unlock()
			return l.Allow()
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(7919))
			for pb.Next() {
				allow(keys[i%benchKeys])
				i++
			}
		})
	})
}

// BenchmarkThreeHits is one request checked against three limits (user,
// route, global) through the engine.
func BenchmarkThreeHits(b *testing.B) {
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := limiter.New(s, limiter.Options{})
	mk := func(name string, alg floodgate.Algorithm) *limiter.Rule {
		return ruletest.Rule(b, floodgate.Limit{Name: name, Algorithm: alg, Rate: 1e6, Per: time.Second,
			Burst: 1000, Max: 1e9, Window: time.Hour})
	}
	user, route, global := mk("user", floodgate.TokenBucket), mk("route", floodgate.SlidingWindow), mk("global", floodgate.GCRA)
	keys := keyNames(benchKeys)
	var seq atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(7919))
		hits := []limiter.Hit{{Rule: user, Cost: 1}, {Rule: route, Key: "/api", Cost: 1}, {Rule: global, Key: "all", Cost: 1}}
		req := limiter.Request{Hits: hits}
		var res limiter.Result
		for pb.Next() {
			hits[0].Key = keys[i%benchKeys]
			i++
			if err := l.Decide(context.Background(), &req, &res); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemory1M inserts 1,000,000 distinct keys and reports the heap
// they take per key: the entries, the index and the store's copy of the
// keys' bytes (the strings handed in are made before the measurement).
func BenchmarkMemory1M(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	r := ruletest.Rule(b, floodgate.Limit{Name: "mem", Algorithm: floodgate.GCRA, Rate: 1, Per: time.Hour, Burst: 10})
	b.ReportAllocs()
	for b.Loop() {
		before := heapInUse()
		s, err := memstore.New(memstore.Options{SweepInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		hits := make([]limiter.Hit, 1)
		out := make([]floodgate.Decision, 1)
		for _, k := range keys {
			hits[0] = limiter.Hit{Rule: r, Key: k, Cost: 1}
			if err := s.Decide(context.Background(), hits, false, out); err != nil {
				b.Fatal(err)
			}
		}
		after := heapInUse()
		if k := s.Stats().Keys; k != n {
			b.Fatalf("%d keys, want %d", k, n)
		}
		b.ReportMetric(float64(after-before)/n, "bytes/key")
		runtime.KeepAlive(s)
		s.Close()
	}
}

// BenchmarkFlood10M sends 10,000,000 random keys at a store capped at
// 100,000 keys and fails if it ever holds more.
func BenchmarkFlood10M(b *testing.B) {
	const n, capKeys = 10_000_000, 100_000
	r := ruletest.Rule(b, floodgate.Limit{Name: "flood", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour})
	for b.Loop() {
		s, err := memstore.New(memstore.Options{MaxKeys: capKeys, SweepInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		hits := make([]limiter.Hit, 1)
		out := make([]floodgate.Decision, 1)
		var buf []byte
		peak := 0
		for i := range n {
			buf = strconv.AppendUint(buf[:0], rng.Uint64(), 36)
			hits[0] = limiter.Hit{Rule: r, Key: string(buf), Cost: 1}
			if err := s.Decide(context.Background(), hits, false, out); err != nil {
				b.Fatal(err)
			}
			if i%1_000_000 == 0 {
				peak = max(peak, s.Stats().Keys)
			}
		}
		st := s.Stats()
		peak = max(peak, st.Keys)
		if peak > capKeys {
			b.Fatalf("held %d keys, more than the cap %d", peak, capKeys)
		}
		b.ReportMetric(float64(peak), "peak-keys")
		b.ReportMetric(float64(st.Evictions), "evictions")
		s.Close()
	}
}

// BenchmarkKeyedFresh is BenchmarkKeyed's memstore case with the keys a
// server sees: each request brings its own copy of the key, not the
// string the store was first given, so finding the entry compares the
// bytes of two strings, as it does in production.
func BenchmarkKeyedFresh(b *testing.B) {
	keys := keyNames(benchKeys)
	lookup := make([]string, len(keys))
	for i, k := range keys {
		lookup[i] = strings.Clone(k)
	}
	s, r := benchBucket(b)
	out := make([]floodgate.Decision, 1)
	for _, k := range keys {
		if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: k, Cost: 1}}, false, out); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	decideParallel(b, s, r, lookup, &seq)
}

// BenchmarkKeyedInterleaved measures the same two workloads as
// BenchmarkKeyed (memstore and map+mutex+x/time/rate), but alternates them
// in short rounds on GOMAXPROCS goroutines each, so that a machine whose
// load changes during the run treats both alike. It reports both costs per
// decision and memstore's speedup over the baseline.
func BenchmarkKeyedInterleaved(b *testing.B) {
	keys := keyNames(benchKeys)
	s, r := benchBucket(b)
	var mu sync.Mutex
	limiters := make(map[string]*rate.Limiter)
	baseline := func(key string) {
		mu.Lock()
		l, ok := limiters[key]
		if !ok {
			l = rate.NewLimiter(1000, 100)
			limiters[key] = l
		}
		mu.Unlock()
		l.Allow()
	}
	procs := runtime.GOMAXPROCS(0)
	// round runs ops decisions split over procs goroutines and returns the
	// wall time they took.
	round := func(ops int, mem bool) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for p := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hits := []limiter.Hit{{Rule: r, Cost: 1}}
				out := make([]floodgate.Decision, 1)
				i := p * 7919
				for range ops / procs {
					k := keys[i%benchKeys]
					i++
					if mem {
						hits[0].Key = k
						_ = s.Decide(context.Background(), hits, false, out)
					} else {
						baseline(k)
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	const perRound = 200_000
	var memTime, baseTime time.Duration
	var n int
	for b.Loop() {
		memTime += round(perRound, true)
		baseTime += round(perRound, false)
		n += perRound
	}
	memNs := float64(memTime.Nanoseconds()) / float64(n)
	baseNs := float64(baseTime.Nanoseconds()) / float64(n)
	b.ReportMetric(memNs, "memstore-ns/decision")
	b.ReportMetric(baseNs, "baseline-ns/decision")
	b.ReportMetric(baseNs/memNs, "speedup")
}
