package main

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0.001, time.Millisecond}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("percentile of one = %v, want it", got)
	}
}

func rec(sent, latency time.Duration, status int, upstream bool, tenant, tier uint8) record {
	return record{sent: sent, latency: latency, status: status, upstream: upstream,
		retry: status == 503 && !upstream, tenant: tenant, tier: tier}
}

func TestSummarizeCountsGoodputWithinTheObjectiveAndLatencyOfAdmittedOnly(t *testing.T) {
	s := time.Second
	recs := []record{
		rec(0, 10*time.Millisecond, 200, true, 0, tierDefault),   // before the window
		rec(s, 10*time.Millisecond, 200, true, 0, tierCritical),  // good
		rec(s, 90*time.Millisecond, 200, true, 1, tierDefault),   // good
		rec(s, 150*time.Millisecond, 200, true, 1, tierDefault),  // ok, too slow
		rec(2*s, time.Millisecond, 503, false, 1, tierSheddable), // shed by the gateway
		rec(2*s, time.Millisecond, 503, false, 0, tierSheddable), // shed by the gateway
		rec(2*s, 2*time.Millisecond, 503, true, 0, tierDefault),  // the upstream's queue is full
		rec(2*s, 5*time.Second, 0, false, 1, tierCritical),       // timed out
		{sent: 2 * s, unsent: true, tier: tierDefault},           // not sent
		rec(3*s, 10*time.Millisecond, 200, true, 0, tierDefault), // after the window
	}
	got := summarize(recs, s, 3*s, 100*time.Millisecond, 2)
	if got.seconds != 2 || got.sent != 7 || got.unsent != 1 || got.ok != 3 || got.good != 2 {
		t.Fatalf("seconds %v sent %d unsent %d ok %d good %d, want 2 7 1 3 2", got.seconds, got.sent, got.unsent, got.ok, got.good)
	}
	if got.goodput() != 1 {
		t.Errorf("goodput = %v/s, want 1", got.goodput())
	}
	if got.shed != 2 || got.shedTier != [numTiers]int{0, 0, 2} || got.shedByTenant[0] != 1 || got.shedByTenant[1] != 1 || got.shedNoRetry != 0 {
		t.Errorf("shed %d by tier %v by tenant %v (no Retry-After %d), want 2 [0 0 2] [1 1] 0", got.shed, got.shedTier, got.shedByTenant, got.shedNoRetry)
	}
	if got.timeouts != 1 || got.upstreamFull != 1 {
		t.Errorf("timeouts %d upstream full %d, want 1 1", got.timeouts, got.upstreamFull)
	}
	if got.sentByTier[tierCritical] != 2 || got.okByTier[tierCritical] != 1 {
		t.Errorf("critical sent %d ok %d, want 2 1", got.sentByTier[tierCritical], got.okByTier[tierCritical])
	}
	// Admitted: the three 200s and the timeout; not the upstream's 503.
	if got.admitted != 4 || got.p50 != 90*time.Millisecond || got.p99 != 5*time.Second {
		t.Errorf("admitted %d p50 %v p99 %v, want 4 90ms 5s", got.admitted, got.p50, got.p99)
	}
	if got.goodByTenant[0] != 1 || got.goodByTenant[1] != 1 {
		t.Errorf("good by tenant %v, want [1 1]", got.goodByTenant)
	}
}

func TestPerSecondBucketsBySendTime(t *testing.T) {
	ms10 := 10 * time.Millisecond
	recs := []record{
		rec(100*time.Millisecond, ms10, 200, true, 0, 0),
		rec(900*time.Millisecond, 30*time.Millisecond, 200, true, 0, 0),
		rec(1500*time.Millisecond, time.Second, 200, true, 0, 0), // too slow
		rec(1600*time.Millisecond, ms10, 503, false, 0, 0),       // shed: no latency
		rec(1700*time.Millisecond, 0, 503, true, 0, 0),           // the upstream's queue is full: no latency
		rec(3500*time.Millisecond, ms10, 200, true, 0, 0),        // past the end
	}
	good, p99 := perSecond(recs, 3*time.Second, 100*time.Millisecond)
	if len(good) != 3 || good[0] != 2 || good[1] != 0 || good[2] != 0 {
		t.Errorf("goodput per second %v, want [2 0 0]", good)
	}
	if p99[0] != 30 || p99[1] != 1000 || !math.IsNaN(p99[2]) {
		t.Errorf("p99 per second %v, want [30 1000 NaN]", p99)
	}
}

func samples(limits ...float64) []sample {
	out := make([]sample, len(limits))
	for i, l := range limits {
		out[i] = sample{at: time.Duration(i) * time.Second, limit: l}
	}
	return out
}

func TestSettleIsWhenTheLimitEntersTheBandForGood(t *testing.T) {
	// The change at 2 s; best 8, ±20%: 6.4 to 9.6.
	s := samples(16, 16, 14, 9, 12, 9, 8, 7, 8, 20)
	d, ok := settle(s, 2*time.Second, 9*time.Second, 8, 0.2)
	if !ok || d != 3*time.Second {
		t.Errorf("settle = %v, %v, want 3s (from the sample at 5 s), true", d, ok)
	}
	if _, ok := settle(s, 2*time.Second, 10*time.Second, 8, 0.2); ok {
		t.Error("settle with the last sample outside the band = ok, want not")
	}
	if _, ok := settle(samples(nan, nan), 0, time.Minute, 8, 0.2); ok {
		t.Error("settle without samples = ok, want not")
	}
}

func TestMinAfterReachIgnoresTheClimbFromTheInitialLimit(t *testing.T) {
	s := samples(8, 10, 12, 16, 14, 12, 16)
	low, reached := minAfterReach(s, 0, time.Minute, 11.2)
	if !reached || low != 12 {
		t.Errorf("minAfterReach = %v, %v, want 12, true", low, reached)
	}
	if _, reached := minAfterReach(samples(2, 3), 0, time.Minute, 11.2); reached {
		t.Error("minAfterReach below the level all along: reached, want not")
	}
	if m := meanLimit(s, time.Second, 3*time.Second); m != 11 {
		t.Errorf("meanLimit = %v, want 11", m)
	}
}

// synthetic is a run's results: the upstream has 10 workers of 100 ms
// (100 requests/s), no-load p99 is 50 ms (objective 200 ms).
func synthetic() *results {
	return &results{
		cal: calibration{workers: 10, service: 100 * time.Millisecond, meanService: 100 * time.Millisecond,
			p50: 40 * time.Millisecond, p99: 50 * time.Millisecond, samples: 100},
		tol: 0.2, floor: 0.7, settleMax: 10 * time.Second,
	}
}

// steady is d of n good answers a second of latency lat, tier tier; plus
// shed a second refused in tier shedTier.
func steady(d time.Duration, n int, lat time.Duration, tier uint8, shed int, shedTier uint8) []record {
	var out []record
	for k := 0; k < int(d/time.Second); k++ {
		for i := range n {
			at := time.Duration(k)*time.Second + time.Duration(i)*time.Second/time.Duration(n)
			out = append(out, rec(at, lat, 200, true, uint8(i%2), tier))
		}
		for i := range shed {
			out = append(out, rec(time.Duration(k)*time.Second, time.Millisecond, 503, false, uint8(i%2), shedTier))
		}
	}
	return out
}

func TestGoalsAreCheckedOnTheRightCases(t *testing.T) {
	r := synthetic()
	tenants := []string{"t1", "t2"}
	spec3 := &caseSpec{name: "3x", duration: 10 * time.Second, tenants: tenants, heavy: -1,
		streams: []stream{{rate: 300}}}
	spec2 := &caseSpec{name: "2x", duration: 10 * time.Second, tenants: tenants, heavy: -1,
		streams: []stream{{rate: 200}}}
	step := &caseSpec{name: "step", duration: 30 * time.Second, tenants: tenants, heavy: -1,
		schedule: []capStep{{0, 10}, {10 * time.Second, 5}, {20 * time.Second, 10}}}
	var lim []sample
	for i := range 120 {
		at := time.Duration(i) * 250 * time.Millisecond
		l := 10.0
		switch {
		case at >= 10*time.Second && at < 13*time.Second:
			l = 8 // outside 5±20% until 13 s: settles in 3 s
		case at >= 13*time.Second && at < 20*time.Second:
			l = 5
		case at >= 20*time.Second:
			l = 6 // never back within 10±20%
		}
		lim = append(lim, sample{at: at, limit: l})
	}
	r.cases = []*caseResult{
		{spec: spec3, config: configNone, recs: steady(10*time.Second, 10, 3*time.Second, tierDefault, 0, 0)},
		{spec: spec3, config: configAdaptive, recs: steady(10*time.Second, 95, 80*time.Millisecond, tierDefault, 200, tierSheddable),
			samples: samples(10, 10, 9, 10)},
		{spec: spec2, config: configAdaptive, recs: append(steady(10*time.Second, 95, 80*time.Millisecond, tierCritical, 50, tierSheddable),
			steady(10*time.Second, 1, time.Millisecond, tierDefault, 1, tierDefault)...), samples: samples(10, 6, 10)},
		{spec: step, config: configAdaptive, samples: lim},
	}
	got := map[string]bool{}
	for _, g := range r.goals() {
		got[g.what+"/"+g.config] = g.met
		if strings.HasPrefix(g.what, "steady") && g.measured != "2x: min 6, 3x: min 9, step (before the halving): min 10" {
			t.Errorf("steady: measured %q, want the step case up to its halving too", g.measured)
		}
	}
	want := map[string]bool{
		"3x: goodput ≥ 90% of capacity/none":                                     false,
		"3x: admitted p99 ≤ 2× no-load p99/none":                                 false,
		"3x: goodput ≥ 90% of capacity/adaptive":                                 true,
		"3x: admitted p99 ≤ 2× no-load p99/adaptive":                             true,
		"2x: critical succeed ≥ 99.9%/adaptive":                                  true,
		"2x: every refusal in the lowest tier with traffic/adaptive":             false,
		"step: limit within ±20% of 5 within 10s of the change at 10s/adaptive":  true,
		"step: limit within ±20% of 10 within 10s of the change at 20s/adaptive": false,
		"steady: limit never below 70% of 10 once there/adaptive":                false,
	}
	for k, v := range want {
		if m, ok := got[k]; !ok || m != v {
			t.Errorf("goal %q: met %v (checked %v), want %v", k, m, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("goals %v, want exactly %v", got, want)
	}
	var b strings.Builder
	r.writeReport(&b)
	for _, s := range []string{"| 3x | adaptive | 300 | 95 | 95.0% | 80 | 80 | 2000 (0/0/2000) | t1 1000, t2 1000 |", "| goal | config | measured | met |"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("the report has no %q:\n%s", s, b.String())
		}
	}
}

func TestTenantGoalComparesTheOthersWithAndWithoutTheHeavyTenant(t *testing.T) {
	r := synthetic()
	names := []string{"t1", "heavy"}
	alone := &caseSpec{name: "tenant-alone", duration: 10 * time.Second, tenants: names, heavy: 1}
	heavy := &caseSpec{name: "tenant-heavy", duration: 10 * time.Second, tenants: names, heavy: 1}
	others := func(n int) []record {
		var out []record
		for i := range 10 * n {
			out = append(out, rec(time.Duration(i)*time.Second/time.Duration(n), 60*time.Millisecond, 200, true, 0, tierDefault))
		}
		return out
	}
	r.cases = []*caseResult{
		{spec: alone, config: configFixed, recs: others(50)},
		{spec: heavy, config: configFixed, recs: append(others(46), rec(0, time.Millisecond, 503, false, 1, tierDefault))},
		{spec: alone, config: configNone, recs: others(50)},
		{spec: heavy, config: configNone, recs: others(40)},
	}
	for _, g := range r.goals() {
		want := g.config == configFixed
		if g.met != want {
			t.Errorf("%s, %s: met %v (%s), want %v", g.what, g.config, g.met, g.measured, want)
		}
	}
	if got := r.othersGoodput(r.cases[1]); got != 46 {
		t.Errorf("othersGoodput = %v, want 46 (the heavy tenant's answers left out)", got)
	}
}

func TestPolicyWritesTheOverloadBlock(t *testing.T) {
	o := overloadSettings{limit: 16, min: 2, max: 256, initial: 8, queueSize: 64, queuePerTenant: 16, queueWait: 50 * time.Millisecond}
	none := policy(configNone, "http://127.0.0.1:9", o)
	if strings.Contains(none, "overload") || !strings.Contains(none, "upstream: http://127.0.0.1:9") ||
		!strings.Contains(none, `trusted_proxies: ["127.0.0.1/32"]`) {
		t.Errorf("none:\n%s", none)
	}
	fixed := policy(configFixed, "http://127.0.0.1:9", o)
	for _, s := range []string{"    overload:\n      limit: 16\n", "queue: {size: 64, per_tenant: 16, max_wait: 50ms}",
		"tenant: header:X-Tenant", "- {name: critical, reserve: 0.2}", "- {name: sheddable}", "tier: default", "tier_header: X-Priority"} {
		if !strings.Contains(fixed, s) {
			t.Errorf("fixed has no %q:\n%s", s, fixed)
		}
	}
	adaptive := policy(configAdaptive, "http://127.0.0.1:9", o)
	if !strings.Contains(adaptive, "adaptive: {min: 2, max: 256, initial: 8}") || strings.Contains(adaptive, "limit: 16") {
		t.Errorf("adaptive:\n%s", adaptive)
	}
}

func TestParseMetricsPicksTheFamilies(t *testing.T) {
	body := []byte(`# HELP floodgate_overload_limit The limit.
# TYPE floodgate_overload_limit gauge
floodgate_overload_limit{route="api"} 12
floodgate_overload_inflight{route="api"} 7
floodgate_overload_shed_total{reason="queue_full",route="api",tier="sheddable"} 42
floodgate_requests_total{route="api"} 99
`)
	m := parseMetrics(body, "floodgate_overload_")
	if len(m) != 3 || m[`floodgate_overload_shed_total{reason="queue_full",route="api",tier="sheddable"}`] != 42 {
		t.Errorf("parseMetrics = %v", m)
	}
	if gauge(m, "floodgate_overload_limit") != 12 || gauge(m, "floodgate_overload_inflight") != 7 || !math.IsNaN(gauge(m, "floodgate_overload_queued")) {
		t.Errorf("gauges from %v", m)
	}
}

func TestRecordShedIsTheGatewaysOwn503(t *testing.T) {
	for _, c := range []struct {
		r    record
		shed bool
	}{
		{record{status: http.StatusServiceUnavailable}, true},
		{record{status: http.StatusServiceUnavailable, upstream: true}, false},
		{record{status: http.StatusBadGateway}, false},
		{record{status: 0}, false},
	} {
		if c.r.shed() != c.shed {
			t.Errorf("%+v.shed() = %v, want %v", c.r, !c.shed, c.shed)
		}
	}
}

func TestShedReasonsSumByReasonAndTier(t *testing.T) {
	m := map[string]float64{
		`floodgate_overload_shed_total{reason="queue_full",route="api",tier="sheddable"}`: 40,
		`floodgate_overload_shed_total{reason="queue_full",route="web",tier="sheddable"}`: 2,
		`floodgate_overload_shed_total{reason="max_wait",route="api",tier="default"}`:     3,
		`floodgate_overload_shed_total{reason="reserve",route="api",tier="critical"}`:     0,
		`floodgate_overload_limit{route="api"}`:                                           16,
	}
	if got, want := shedReasons(m), "max_wait (default) 3, queue_full (sheddable) 42"; got != want {
		t.Errorf("shedReasons = %q, want %q", got, want)
	}
	if got := shedReasons(nil); got != "" {
		t.Errorf("shedReasons(nil) = %q", got)
	}
	if got := label(`x{subreason="a",reason="b"}`, "reason"); got != "b" {
		t.Errorf("label = %q, want b", got)
	}
}
