package rls

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// run is one run of a scenario: on the embedded store (with a clock the
// test holds still) or on a real Redis, in Floodgate's mode or in the
// compatibility mode.
type run struct {
	t      *testing.T
	compat bool
	redis  *redistest.Server // nil: the embedded store
	prefix string
	reg    *prometheus.Registry
	stats  *Stats
	n      int
}

// start serves the configuration src in the run's mode, with statistics
// on r.reg, and returns a client.
func (r *run) start(src string, opts Options) rlsv3.RateLimitServiceClient {
	r.t.Helper()
	cfg, err := ParseWith("test.yaml", []byte(src), LoadOptions{Compat: r.compat})
	if err != nil {
		r.t.Fatal(err)
	}
	if r.stats == nil {
		if r.stats, err = NewStats(r.reg, StatsOptions{}); err != nil {
			r.t.Fatal(err)
		}
	}
	if opts.Stats == nil {
		opts.Stats = r.stats
	}
	if r.redis == nil {
		c, _ := startService(r.t, cfg, newClock(), opts)
		return c
	}
	r.n++
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + r.redis.Addr, Prefix: fmt.Sprintf("%s:%d:", r.prefix, r.n)})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { st.Close() })
	c, _ := serve(r.t, New(limiter.New(st, limiter.Options{Timeout: 5 * time.Second}), cfg, opts), ServerOptions{})
	return c
}

// stat reads a statistic of the run: the series name with its labels.
func (r *run) stat(name string, labels promtest.Labels) float64 {
	r.t.Helper()
	return promtest.Value(r.t, r.reg, name, labels)
}

// ask sends a request; a gRPC error ends the test.
func (r *run) ask(c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		r.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// req builds a request: the domain, then descriptors.
func req(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

var (
	sharedRedis     *redistest.Server
	sharedRedisOnce sync.Once
	sharedRedisErr  error
	// runs numbers the scenario runs on the shared Redis, so that a test
	// run again in the same process (go test -count) has keys of its own.
	runs atomic.Int64
)

// redisServer starts one redis-server for the package's scenarios (each
// run, each attempt and each repetition of a test keeps its keys apart
// with a prefix of its own); it is stopped by
// TestMain.
func redisServer(t *testing.T) *redistest.Server {
	t.Helper()
	sharedRedisOnce.Do(func() { sharedRedis, sharedRedisErr = redistest.StartServer(redistest.Config{}) })
	if sharedRedisErr != nil {
		t.Fatal(sharedRedisErr)
	}
	return sharedRedis
}

// everywhere runs scenario on the embedded store and on Redis, in both
// modes. On Redis windows follow the real clock: a scenario starts early
// in a window of unit, and when it fails only because a window ended
// while it ran it is run again, on fresh keys.
func everywhere(t *testing.T, unit Unit, scenario func(r *run) error) {
	for _, compat := range []bool{false, true} {
		mode := "floodgate"
		if compat {
			mode = "compat"
		}
		t.Run(mode+"/memory", func(t *testing.T) {
			t.Parallel()
			r := &run{t: t, compat: compat, reg: prometheus.NewRegistry()}
			if err := scenario(r); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(mode+"/redis", func(t *testing.T) {
			rs := redisServer(t)
			w := time.Duration(unit.seconds()) * time.Second
			for attempt := 1; ; attempt++ {
				// Start early in a window.
				now := time.Now()
				if left := w - time.Duration(now.UnixNano())%w; left < min(w/2, 5*time.Second) {
					time.Sleep(left + 10*time.Millisecond)
				}
				window := time.Now().UnixNano() / int64(w)
				r := &run{t: t, compat: compat, redis: rs, prefix: fmt.Sprintf("%s:%d", t.Name(), runs.Add(1)), reg: prometheus.NewRegistry()}
				err := scenario(r)
				if err == nil {
					return
				}
				if time.Now().UnixNano()/int64(w) == window || attempt == 5 {
					t.Fatal(err)
				}
				t.Logf("attempt %d crossed a window of one %s (%v); again", attempt, unit, err)
			}
		})
	}
}

// statusIs checks a descriptor status: its code, its limit (rpu 0 and
// unit 0 for none) and what it has left.
func statusIs(st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, left uint32) error {
	if st.GetCode() != code || st.GetCurrentLimit().GetRequestsPerUnit() != rpu || st.GetCurrentLimit().GetUnit() != unit || st.GetLimitRemaining() != left {
		return fmt.Errorf("status %v, want %v, %d per %v, %d left", st, code, rpu, unit, left)
	}
	return nil
}
