package gateway

import (
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/store/redisstore"
)

// TestTwoGatewaysOneRedis runs two gateway instances, each with its own
// engine and Redis connection, against one real redis-server: concurrent
// clients spread over both instances get exactly the limit's 60 requests
// through. The limit refills one unit an hour, so real time plays no part.
func TestTwoGatewaysOneRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const limit = 60
	rule := ruletest.Rule(t, floodgate.Limit{Name: "shared", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: limit})
	up := newUpstream(t, nil)
	upURL, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	// One gateway on each engine, sharing the counts.
	var fronts []string
	for _, fr := range proxyFronts {
		store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		engine := limiter.New(store, limiter.Options{Timeout: 2 * time.Second})
		g, err := New(Options{Matcher: funcMatcher(func(_ *Request, m *Match) error {
			m.Upstream = upURL
			m.Hits = append(m.Hits, limiter.Hit{Rule: rule, Key: "tenant-1", Cost: 1})
			return nil
		}), Engine: engine})
		if err != nil {
			t.Fatal(err)
		}
		fronts = append(fronts, serveFront(t, fr, g, nil))
	}
	client := newClient(t)
	var ok, denied atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 12; i++ {
				a := do(t, client, "GET", fronts[(c+i)%2]+"/x", nil)
				switch a.status {
				case 200:
					ok.Add(1)
				case 429:
					denied.Add(1)
				default:
					t.Errorf("status %d: %s", a.status, a.body)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != limit || denied.Load() != 16*12-limit {
		t.Errorf("200s %d, 429s %d; want exactly %d and %d", ok.Load(), denied.Load(), limit, 16*12-limit)
	}
	if up.served.Load() != limit {
		t.Errorf("upstream served %d, want %d", up.served.Load(), limit)
	}
}

// TestRedisDownFailurePolicies stops Redis under a running gateway: a limit
// that fails open lets requests through, one that fails closed refuses
// them (with a Retry-After), and the metrics count the degraded decisions.
func TestRedisDownFailurePolicies(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testRedisDownFailurePolicies)
}

func testRedisDownFailurePolicies(t *testing.T, fr string) {
	srv := redistest.Start(t)
	open := ruletest.Rule(t, floodgate.Limit{Name: "open", Algorithm: floodgate.TokenBucket, Rate: 100, Per: time.Second, Burst: 100})
	closed := ruletest.With(t, floodgate.Limit{Name: "closed", Algorithm: floodgate.TokenBucket, Rate: 100, Per: time.Second, Burst: 100}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine := limiter.New(store, limiter.Options{Timeout: 100 * time.Millisecond, Observer: m})
	_, frontURL, c := startFront(t, fr, Options{Engine: engine, Observer: m, Matcher: funcMatcher(func(r *Request, mt *Match) error {
		rule := open
		if r.Path == "/closed" {
			rule = closed
		}
		mt.Hits = append(mt.Hits, limiter.Hit{Rule: rule, Key: "k", Cost: 1})
		return nil
	})}, func(http.ResponseWriter, *http.Request) {})
	for _, path := range []string{"/open", "/closed"} {
		if a := do(t, c, "GET", frontURL+path, nil); a.status != 200 {
			t.Fatalf("%s with Redis up: %d", path, a.status)
		}
	}
	srv.Kill()
	for i := 0; i < 3; i++ {
		if a := do(t, c, "GET", frontURL+"/open", nil); a.status != 200 {
			t.Errorf("fail-open limit with Redis down: %d", a.status)
		}
		if a := do(t, c, "GET", frontURL+"/closed", nil); a.status != 429 || a.header.Get("Retry-After") == "" {
			t.Errorf("fail-closed limit with Redis down: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
		}
	}
	for _, limit := range []string{"open", "closed"} {
		if n := promtest.Value(t, reg, "floodgate_degraded_decisions_total", promtest.Labels{"front_end": "gateway", "limit": limit}); n < 3 {
			t.Errorf("degraded decisions of the %s limit: %v", limit, n)
		}
	}
}
