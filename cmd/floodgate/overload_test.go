package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
)

// The end-to-end tests of overload control (issue 22, points 1–3):
// "floodgate serve" on both engines in front of a real upstream on
// loopback.

// fetch sends a GET with headers from any goroutine: the status, or 0
// and the error.
func fetch(c *http.Client, url string, hdr ...string) (int, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// eventually polls cond for up to 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func overloadClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// serveOverload runs floodgate serve on engine with the policy src, in
// which UPSTREAM stands for up's URL.
func serveOverload(t *testing.T, engine, src string, up *httptest.Server) (gw, admin string) {
	t.Helper()
	cfg := writeConfig(t, strings.ReplaceAll(src, "UPSTREAM", up.URL))
	gw, admin, stop, _ := startServe(t, "--engine", engine, "--config", cfg,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	t.Cleanup(func() { _ = stop() })
	return gw, admin
}

// TestServeOverloadAdaptive (point 1): an upstream of four workers whose
// latency rises with the requests waiting for them makes the adaptive
// limit fall below its maximum, as /metrics shows.
func TestServeOverloadAdaptive(t *testing.T) { forEngines(t, testServeOverloadAdaptive) }

func testServeOverloadAdaptive(t *testing.T, engine string) {
	workers := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		workers <- struct{}{}
		time.Sleep(3 * time.Millisecond)
		<-workers
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	gw, admin := serveOverload(t, engine, `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: UPSTREAM
    overload:
      adaptive: {min: 1, max: 64, initial: 64, window: 50ms, min_samples: 20}
      tier: critical
`, up)
	series := `floodgate_overload_limit{route="api"}`
	c := overloadClient(t)
	if code, err := fetch(c, gw+"/x"); err != nil || code != 200 {
		t.Fatalf("first request: %d %v", code, err)
	}
	if n := metricValue(t, admin, series); n != 64 {
		t.Fatalf("%s = %d at the start, want 64", series, n)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := 0; i < 3000 && !stop.Load(); i++ {
				code, err := fetch(c, gw+"/x")
				if err != nil || code != 200 && code != http.StatusServiceUnavailable {
					t.Errorf("%d %v", code, err)
					return
				}
			}
		})
	}
	limit := 64
	for i := 0; i < 600 && limit >= 64; i++ {
		time.Sleep(50 * time.Millisecond)
		limit = metricValue(t, admin, series)
	}
	stop.Store(true)
	wg.Wait()
	if limit >= 64 || limit < 1 {
		t.Errorf("%s = %d under load, want below its max of 64", series, limit)
	}
}

// TestServeOverloadTiers (point 2): at the capacity of the lowest tier, a
// request with a key of the critical plan passes while one with a key of
// the sheddable plan is answered 503.
func TestServeOverloadTiers(t *testing.T) { forEngines(t, testServeOverloadTiers) }

func testServeOverloadTiers(t *testing.T, engine string) {
	release := make(chan struct{})
	var held atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		<-release
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	gw, admin := serveOverload(t, engine, fmt.Sprintf(`
plans:
  - {name: gold, rate: 1000, tier: critical}
  - {name: bronze, rate: 1000, tier: sheddable}
keys:
  - {name: g, plan: gold, sha256: %s}
  - {name: b, plan: bronze, sha256: %s}
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: UPSTREAM
    overload:
      limit: 10
`, config.HashKey("gold-key"), config.HashKey("bronze-key")), up)
	c := overloadClient(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	// The ceiling of sheddable is 10 − ⌈10·(0.1+0.1)⌉ = 8.
	for range 8 {
		wg.Go(func() {
			if code, err := fetch(c, gw+"/x", "x-api-key", "bronze-key"); err != nil || code != 200 {
				t.Errorf("held bronze request: %d %v", code, err)
			}
		})
	}
	eventually(t, "8 in flight", func() bool { return held.Load() == 8 })
	code, h, body := get(t, gw+"/x", "x-api-key", "bronze-key")
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") != "1" || !strings.Contains(body, "Service Unavailable") {
		t.Errorf("sheddable at capacity: %d %q %v", code, body, h)
	}
	wg.Go(func() {
		if code, err := fetch(c, gw+"/x", "x-api-key", "gold-key"); err != nil || code != 200 {
			t.Errorf("critical at capacity: %d %v", code, err)
		}
	})
	eventually(t, "the critical request at the upstream", func() bool { return held.Load() == 9 })
	if n := metricValue(t, admin, `floodgate_overload_shed_total{reason="full",route="api",tier="sheddable"}`); n != 1 {
		t.Errorf("sheddable shed %d, want 1", n)
	}
	if n := metricValue(t, admin, `floodgate_overload_inflight{route="api"}`); n != 9 {
		t.Errorf("in flight %d, want 9", n)
	}
}

// TestServeOverloadFair (point 3): a tenant with twenty times the queued
// requests of another does not make the other wait behind its backlog.
func TestServeOverloadFair(t *testing.T) { forEngines(t, testServeOverloadFair) }

func testServeOverloadFair(t *testing.T, engine string) {
	gate := make(chan struct{})
	var mu sync.Mutex
	var order []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.Header.Get("X-Tenant"))
		mu.Unlock()
		<-gate
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	gw, admin := serveOverload(t, engine, `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: UPSTREAM
    overload:
      limit: 1
      tier: critical
      tenant: header:X-Tenant
      queue: {size: 64, per_tenant: 32, max_wait: 60s}
`, up)
	c := overloadClient(t)
	queued := `floodgate_overload_queued{route="api"}`
	var wg sync.WaitGroup
	send := func(tenant string) {
		wg.Go(func() {
			if code, err := fetch(c, gw+"/x", "X-Tenant", tenant); err != nil || code != 200 {
				t.Errorf("%s: %d %v", tenant, code, err)
			}
		})
	}
	send("heavy")
	eventually(t, "1 at the upstream", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 1 })
	for i := range 20 {
		send("heavy")
		eventually(t, "heavy queued", func() bool { return metricValue(t, admin, queued) == i+1 })
	}
	send("light")
	eventually(t, "light queued", func() bool { return metricValue(t, admin, queued) == 21 })
	for range 22 {
		gate <- struct{}{}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if at := slices.Index(order, "light"); at < 0 || at > 2 {
		t.Errorf("the light tenant was served at %d of %d; want within its first turn", at, len(order))
	}
}

// TestCheckOverload: floodgate check prints a route's overload settings
// and a plan's tier.
func TestCheckOverload(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `
plans:
  - {name: gold, rate: 100, tier: critical}
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9000
    overload:
      adaptive: {min: 4, max: 512, initial: 16}
      queue: {size: 256, per_tenant: 32, max_wait: 500ms}
      tenant: api_key
      tier_header: X-Priority
`)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"check", "--config", cfg}, &out, &errOut); err != nil {
		t.Fatalf("check: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{
		"overload of api: adaptive limit 4..512 from 16, queue 256 (32 per tenant, max wait 500ms), tenant api_key, tiers critical (reserve 0.1), default (reserve 0.1), sheddable; route tier default, tier header X-Priority from trusted proxies",
		"plan gold: its keys' requests are of tier critical under overload control",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}

// TestServeShedTenantsBoundedOnDefaults: floodgate serve counts sheds by
// tenant in at most 50 (route, tenant) series of their own, without any
// setting: a flood of 200 tenants, each named anew in its X-Tenant field
// and shed at a full cap, leaves 50 tenant series and the folded one
// (`_other`), which counts the other 150; no shed goes uncounted.
func TestServeShedTenantsBoundedOnDefaults(t *testing.T) {
	forEngines(t, testServeShedTenantsBoundedOnDefaults)
}

func testServeShedTenantsBoundedOnDefaults(t *testing.T, engine string) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	gw, admin := serveOverload(t, engine, `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: UPSTREAM
    overload:
      limit: 1
      tiers: [{name: default}]
      tenant: header:X-Tenant
`, up)
	c := overloadClient(t)
	held := make(chan int, 1)
	go func() {
		code, _ := fetch(c, gw+"/held", "X-Tenant", "holder")
		held <- code
	}()
	defer func() {
		close(release)
		if code := <-held; code != 200 {
			t.Errorf("the held request: %d", code)
		}
	}()
	eventually(t, "1 in flight", func() bool { return metricValue(t, admin, `floodgate_overload_inflight{route="api"}`) == 1 })
	const flood = 200
	for i := range flood {
		if code, err := fetch(c, gw+"/x", "X-Tenant", fmt.Sprintf("tenant-%03d", i)); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("tenant %d: %d %v, want 503", i, code, err)
		}
	}
	re := regexp.MustCompile(`(?m)^floodgate_overload_shed_tenants_total\{route="api",tenant="([^"]*)"\} (\d+)$`)
	named, total, other := 0, 0, 0
	for _, m := range re.FindAllStringSubmatch(metricsText(t, admin), -1) {
		n, _ := strconv.Atoi(m[2])
		total += n
		if m[1] == "_other" {
			other = n
		} else {
			named++
		}
	}
	if named != 50 || other != flood-50 || total != flood {
		t.Errorf("%d tenant series and _other counting %d, %d sheds in all; want 50, %d and %d", named, other, total, flood-50, flood)
	}
}
