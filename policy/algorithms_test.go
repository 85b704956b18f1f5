package policy_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/policy"
)

// TestEveryAlgorithm compiles one limit of each algorithm from the file
// format and checks kinds, windows and a first decision through the engine.
func TestEveryAlgorithm(t *testing.T) {
	t.Parallel()
	p := compile(t, `
limits:
  - {name: tb, algorithm: token_bucket, rate: 5, burst: 10}
  - {name: gcra, algorithm: gcra, rate: 2, per: 1m, burst: 4}
  - {name: meter, algorithm: leaky_bucket, rate: 10, burst: 10}
  - {name: queue, algorithm: leaky_queue, rate: 1, burst: 5, delay: 2}
  - {name: queue-nodelay, algorithm: leaky_queue, rate: 1, burst: 5, delay: nodelay}
  - {name: fixed, algorithm: fixed_window, limit: 100, window: 1m}
  - {name: log, algorithm: sliding_log, limit: 5, window: 1m}
  - {name: slide, algorithm: sliding_window, limit: 2000, window: 5m}
  - {name: inflight, algorithm: concurrency, limit: 3, lease_ttl: 30s}
  - {name: monthly, algorithm: quota, limit: 1000, period: month, anchor_day: 15, time_zone: Europe/Berlin}
`)
	want := []struct {
		name   string
		alg    floodgate.Algorithm
		kind   floodgate.Kind
		window int64
	}{
		{policy.UnknownKeyLimitName, floodgate.TokenBucket, floodgate.KindRate, 60},
		{"tb", floodgate.TokenBucket, floodgate.KindRate, 2},
		{"gcra", floodgate.GCRA, floodgate.KindRate, 120},
		{"meter", floodgate.LeakyBucket, floodgate.KindRate, 1},
		{"queue", floodgate.LeakyQueue, floodgate.KindQueue, 6},
		{"queue-nodelay", floodgate.LeakyQueue, floodgate.KindQueue, 6},
		{"fixed", floodgate.FixedWindow, floodgate.KindRate, 60},
		{"log", floodgate.SlidingLog, floodgate.KindRate, 60},
		{"slide", floodgate.SlidingWindow, floodgate.KindRate, 300},
		{"inflight", floodgate.Concurrency, floodgate.KindConcurrency, 0},
		{"monthly", floodgate.Quota, floodgate.KindQuota, 0}, // months have no fixed length: no w
	}
	if len(p.Limits()) != len(want) {
		t.Fatalf("%d limits", len(p.Limits()))
	}
	for i, w := range want {
		l := p.Limits()[i]
		if l.Name != w.name || l.Rule.Algorithm() != w.alg || l.Kind != w.kind || l.Fields.Window != w.window {
			t.Errorf("limit %d: %s %s %s w=%d, want %+v", i, l.Name, l.Rule.Algorithm(), l.Kind, l.Fields.Window, w)
		}
	}
	if l, _ := p.Limit("queue"); l.Rule.Limit().Delay != 2 {
		t.Errorf("queue delay %d", l.Rule.Limit().Delay)
	}
	if l, _ := p.Limit("queue-nodelay"); l.Rule.Limit().Delay != floodgate.NoDelay {
		t.Errorf("nodelay compiled to %d", l.Rule.Limit().Delay)
	}
	if l, _ := p.Limit("inflight"); l.Rule.Limit().LeaseTTL != 30*time.Second {
		t.Errorf("lease ttl %v", l.Rule.Limit().LeaseTTL)
	}
	r := newRig(t, p, t0)
	a := r.do(&policy.Request{Method: "GET", Path: "/", ClientIP: ip("198.51.100.7")})
	if a.status != 200 || len(a.res.Decisions) != len(want)-1 { // all but the unknown-key limit
		t.Fatalf("first request: %+v", a)
	}
}
