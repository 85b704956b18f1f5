package rls

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

// BenchmarkShouldRateLimit measures the service in process (no gRPC) over
// the embedded store: matching, the engine call and building the answer.
func BenchmarkShouldRateLimit(b *testing.B) {
	st, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchService(b, st, false, false)
}

// BenchmarkShouldRateLimitCompat is BenchmarkShouldRateLimit in
// compatibility mode, without and with envoyproxy/ratelimit's statistics.
func BenchmarkShouldRateLimitCompat(b *testing.B) {
	for _, stats := range []bool{false, true} {
		b.Run("stats="+strconv.FormatBool(stats), func(b *testing.B) {
			st, err := memstore.New(memstore.Options{SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			benchService(b, st, true, stats)
		})
	}
}

// BenchmarkShouldRateLimitNoFields is BenchmarkShouldRateLimit without
// the rate-limit fields, as floodgate rls answers by default.
func BenchmarkShouldRateLimitNoFields(b *testing.B) {
	st, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchService(b, st, false, false, func(o *Options) { o.NoFields = true })
}

// BenchmarkShouldRateLimitStats is BenchmarkShouldRateLimit counting
// envoyproxy/ratelimit's statistics.
func BenchmarkShouldRateLimitStats(b *testing.B) {
	st, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchService(b, st, false, true)
}

func benchService(b *testing.B, st limiter.Store, compat, stats bool, more ...func(*Options)) {
	cfg, err := ParseWith("bench.yaml", []byte(`
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4294967295}
`), LoadOptions{Compat: compat})
	if err != nil {
		b.Fatal(err)
	}
	var opts Options
	if stats {
		if opts.Stats, err = NewStats(prometheus.NewRegistry(), StatsOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range more {
		f(&opts)
	}
	svc := New(limiter.New(st, limiter.Options{Timeout: time.Second}), cfg, opts)
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}},
		}}}
	}
	ctx := context.Background()
	// 50 callers, as in scripts/bench-rls.sh: a remote store needs
	// concurrency to pipeline.
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatal(r, err)
			}
		}
	})
}

// BenchmarkShouldRateLimitRedis is the same over a real redis-server.
func BenchmarkShouldRateLimitRedis(b *testing.B) {
	rs := redistest.Start(b)
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + rs.Addr})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchService(b, st, false, false)
}
