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
