package metrics_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestShedTenantNotUTF8: a client names its tenant (a header the
// overload control groups by) with bytes that are not UTF-8, which no
// label value may hold; when it is shed it gets the 503 every shed
// request gets, and is counted as OtherTenant, without taking a tenant's
// series.
func TestShedTenantNotUTF8(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release) // before up.Close, which waits for its handlers
	f, err := config.Parse("p.yaml", []byte(fmt.Sprintf(`
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: %s
    overload:
      limit: 1
      tier: critical
      tenant: header:X-Tenant
`, up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{MaxTenants: 2})
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(store, limiter.Options{Observer: m}), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(g)
	front.Config.ErrorLog = log.New(io.Discard, "", 0)
	front.Start()
	defer front.Close()
	client := front.Client()
	client.Timeout = 30 * time.Second
	defer client.CloseIdleConnections()
	send := func(tenant string) (int, error) {
		req, err := http.NewRequest("GET", front.URL+"/x", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-Tenant", tenant)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	held := make(chan error, 1)
	go func() {
		status, err := send("first")
		if err == nil && status != 200 {
			err = fmt.Errorf("status %d", status)
		}
		held <- err
	}()
	select {
	case <-arrived:
	case err := <-held:
		t.Fatalf("the first request did not reach the upstream: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the first request did not reach the upstream")
	}
	for _, tenant := range []string{"\xff\xfe", "ok", "\xc3"} {
		status, err := send(tenant)
		if err != nil || status != http.StatusServiceUnavailable {
			t.Errorf("tenant %q over the cap: %d %v, want 503", tenant, status, err)
		}
	}
	release <- struct{}{}
	if err := <-held; err != nil {
		t.Errorf("the held request: %v", err)
	}
	for _, c := range []struct {
		tenant string
		want   float64
	}{{"ok", 1}, {metrics.OtherTenant, 2}} {
		if got := promtest.Value(t, reg, "floodgate_overload_shed_tenants_total", promtest.Labels{"route": "api", "tenant": c.tenant}); got != c.want {
			t.Errorf("tenant %s: %v sheds, want %v", c.tenant, got, c.want)
		}
	}
}

// BenchmarkOverloadShed: what counting a shed by tenant costs, for a
// tenant with a series of its own (seated) and for a flood of new names
// folded into OtherTenant (folded), from one goroutine and from all.
func BenchmarkOverloadShed(b *testing.B) {
	names := make([]string, 4096)
	for i := range names {
		names[i] = fmt.Sprintf("2001:db8::%x", i)
	}
	newM := func(b *testing.B) *metrics.Metrics {
		m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for i := range metrics.DefaultMaxTenants {
			m.OverloadShed("api", "default", fmt.Sprintf("seated-%d", i), "full")
		}
		return m
	}
	b.Run("seated", func(b *testing.B) {
		m := newM(b)
		b.ReportAllocs()
		for b.Loop() {
			m.OverloadShed("api", "default", "seated-7", "full")
		}
	})
	b.Run("folded", func(b *testing.B) {
		m := newM(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m.OverloadShed("api", "default", names[i%len(names)], "full")
			i++
		}
	})
	b.Run("seated-parallel", func(b *testing.B) {
		m := newM(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.OverloadShed("api", "default", "seated-7", "full")
			}
		})
	})
	b.Run("folded-parallel", func(b *testing.B) {
		m := newM(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				m.OverloadShed("api", "default", names[i%len(names)], "full")
				i++
			}
		})
	})
}

// tenantSeries returns the tenant label values of a route's shed series
// and the value of each.
func tenantSeries(t *testing.T, reg prometheus.Gatherer, route string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range promtest.Find(t, reg, "floodgate_overload_shed_tenants_total", promtest.Labels{"route": route}) {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == "tenant" {
				out[lp.GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestShedTenantSeriesGoToTenantsShedNow: a client sheds itself once
// under DefaultMaxTenants names (addresses of an IPv6 /64), taking every
// tenant series; a real tenant shed a minute later is counted as
// OtherTenant, since the client's series are not idle yet, but one shed
// after DefaultIdleTenant takes the series of the client's name shed
// longest ago and keeps it while it is shed, through a flood of new names
// that lasts longer than DefaultIdleTenant. There are never more than
// DefaultMaxTenants tenant series.
func TestShedTenantSeriesGoToTenantsShedNow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	bounded := func(when string) map[string]float64 {
		t.Helper()
		got := tenantSeries(t, reg, "api")
		n := len(got)
		if _, ok := got[metrics.OtherTenant]; ok {
			n--
		}
		if n > metrics.DefaultMaxTenants {
			t.Fatalf("%s: %d tenant series, want at most %d", when, n, metrics.DefaultMaxTenants)
		}
		return got
	}
	for i := range metrics.DefaultMaxTenants {
		m.OverloadShed("api", "default", fmt.Sprintf("2001:db8::%x", i), "full")
		now = now.Add(time.Millisecond)
		bounded("the client's names")
	}
	now = now.Add(time.Minute)
	m.OverloadShed("api", "default", "real", "full")
	if got := bounded("a minute later"); got["real"] != 0 || got[metrics.OtherTenant] != 1 {
		t.Errorf("a minute later: real %v, _other %v; want 0 and 1", got["real"], got[metrics.OtherTenant])
	}
	now = now.Add(metrics.DefaultIdleTenant)
	for i := range 10 {
		m.OverloadShed("api", "default", "real", "full")
		now = now.Add(time.Second)
		bounded(fmt.Sprintf("real's shed %d", i))
	}
	got := bounded("after the idle time")
	if got["real"] != 10 || got[metrics.OtherTenant] != 1 {
		t.Errorf("after the idle time: real %v, _other %v; want 10 and 1", got["real"], got[metrics.OtherTenant])
	}
	if _, ok := got["2001:db8::0"]; ok {
		t.Error("the name shed longest ago kept its series")
	}
	if got["2001:db8::1"] != 1 {
		t.Errorf("the client's second name: %v, want 1 (only one series taken back)", got["2001:db8::1"])
	}
	// The client now makes up a new name every 10ms for ten minutes, and
	// real is shed every 10s: real keeps its series and its count.
	for i := range 60_000 {
		m.OverloadShed("api", "default", fmt.Sprintf("2001:db8::1:%x", i), "full")
		if i%1000 == 0 {
			m.OverloadShed("api", "default", "real", "full")
			bounded("the flood")
		}
		now = now.Add(10 * time.Millisecond)
	}
	if got := bounded("after the flood"); got["real"] != 70 {
		t.Errorf("real after the flood: %v, want 70", got["real"])
	}
}

// TestShedTenantSeriesChurnBounded: a client makes up 200 new tenant
// names a second for half an hour, each shed once; the tenant series
// change hands at most MaxTenants times in any IdleTenant, and no shed
// goes uncounted.
func TestShedTenantSeriesChurnBounded(t *testing.T) {
	t.Parallel()
	const maxTenants, perSecond, seconds = 10, 200, 1800
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	start := now
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{MaxTenants: maxTenants, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var made []time.Duration // when each tenant series appeared
	prev := map[string]float64{}
	for s := range seconds {
		for i := range perSecond {
			m.OverloadShed("api", "default", fmt.Sprintf("2001:db8::%x:%x", s, i), "full")
		}
		got := tenantSeries(t, reg, "api")
		delete(got, metrics.OtherTenant)
		if len(got) > maxTenants {
			t.Fatalf("at %ds: %d tenant series, want at most %d", s, len(got), maxTenants)
		}
		for name := range got {
			if _, ok := prev[name]; !ok {
				made = append(made, now.Sub(start))
			}
		}
		prev = got
		now = now.Add(time.Second)
	}
	for i := range made {
		n := 0
		for _, at := range made[i:] {
			if at < made[i]+metrics.DefaultIdleTenant {
				n++
			}
		}
		if n > maxTenants {
			t.Fatalf("%d tenant series made within %v of %v, want at most %d", n, metrics.DefaultIdleTenant, made[i], maxTenants)
		}
	}
	if len(made) < 2*maxTenants {
		t.Errorf("%d tenant series made in %ds, want idle ones taken back", len(made), seconds)
	}
	total := 0.0
	for _, v := range tenantSeries(t, reg, "api") {
		total += v
	}
	taken := float64(len(made) - maxTenants) // deleted series counted one shed each
	if total+taken != perSecond*seconds {
		t.Errorf("%v sheds counted (and %v in deleted series), want %d", total, taken, perSecond*seconds)
	}
}
