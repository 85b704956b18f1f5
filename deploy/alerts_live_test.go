package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAlertsFollowRealFaults loads the alert rules into a real Prometheus
// that scrapes a real floodgate serve (a gateway that also serves Envoy's
// rate-limit service from descriptor files, as the chart's decision mode
// does) and a real floodgate rls (the chart's ratelimit mode), both on a
// real Redis, with their descriptor files laid out as a ConfigMap volume.
// Under steady traffic no alert is pending or firing. Then the faults the
// alerts name: a version of the descriptor files that does not load, on
// both, must raise FloodgateConfigRejected for each; Redis stopped must
// raise FloodgateStoreBreakerOpen and FloodgateDegradedDecisions for each
// (pending is enough: their "for" is minutes).
func TestAlertsFollowRealFaults(t *testing.T) {
	promBin := program(t, "prometheus", "prometheus")
	redisBin := program(t, "redis-server", "redis-server")
	bin := binary(t)
	dir := t.TempDir()

	redisPort := freePort(t)
	_, stopRedis := startProcessStop(t, "redis-server", redisBin, []string{"--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, nil, nil)
	waitRedis(t, "127.0.0.1:"+redisPort)

	good := map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 100000}\n"}
	bad := map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n"}

	// floodgate serve: a gateway with a limit, and the rate-limit service
	// from descriptor files.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	serveDesc := filepath.Join(dir, "serve", "descriptors")
	writeConfigMapVolume(t, serveDesc, good)
	policyPath := filepath.Join(dir, "serve", "policy.yaml")
	writeFile(t, policyPath, fmt.Sprintf(`version: 1
server:
  grpc_listen: 127.0.0.1:0
  rls_config: [%q]
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: per-ip
    rate: 100000
    per: 1s
    burst: 100000
    key: client_ip
`, serveDesc, up.URL))
	storeFile := filepath.Join(dir, "store-url")
	writeFile(t, storeFile, "redis://127.0.0.1:"+redisPort+"/0")
	lines := startProcess(t, "floodgate serve", bin, []string{"serve", "--config", policyPath, "--store-file", storeFile,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--log-level", "error"}, regexp.MustCompile(`admin on `))
	var gateway, serveMetrics string
	for _, l := range lines {
		if m := regexp.MustCompile(`gateway on (http://\S+)`).FindStringSubmatch(l); m != nil {
			gateway = m[1]
		}
		if m := regexp.MustCompile(`ops on http://(\S+)`).FindStringSubmatch(l); m != nil {
			serveMetrics = m[1]
		}
	}
	if gateway == "" || serveMetrics == "" {
		t.Fatalf("floodgate serve said %q", lines)
	}

	// floodgate rls, set up as the chart's ratelimit mode sets it up.
	rlsRoot := filepath.Join(dir, "rls")
	rlsDesc := filepath.Join(rlsRoot, "ratelimit", "config")
	writeConfigMapVolume(t, rlsDesc, good)
	env := []string{"PATH=" + os.Getenv("PATH"), "RUNTIME_ROOT=" + rlsRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_IGNOREDOTFILES=true", "USE_STATSD=false", "LOG_LEVEL=error", "BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=127.0.0.1:" + redisPort, "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0"}
	lines = startProcessEnv(t, "floodgate rls", bin, []string{"rls"}, env, regexp.MustCompile(`debug \(`))
	var rlsHTTP, rlsMetrics string
	for _, l := range lines {
		if m := regexp.MustCompile(`HTTP \(/json, /healthcheck\) on (\S+)`).FindStringSubmatch(l); m != nil {
			rlsHTTP = m[1]
		}
		if m := regexp.MustCompile(`debug \(\S+ \S+ \S+\) on (\S+)`).FindStringSubmatch(l); m != nil {
			rlsMetrics = m[1]
		}
	}
	if rlsHTTP == "" || rlsMetrics == "" {
		t.Fatalf("floodgate rls said %q", lines)
	}

	rules, err := filepath.Abs("observability/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	promPort := freePort(t)
	promCfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promCfg, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: floodgate
    static_configs:
      - targets: [%q, %q]
`, rules, serveMetrics, rlsMetrics))
	startProcess(t, "prometheus", promBin, []string{"--config.file=" + promCfg, "--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:" + promPort, "--log.level=warn"}, nil)
	prom := "http://127.0.0.1:" + promPort
	waitHTTP(t, prom+"/-/ready")

	// Steady traffic on both until the test ends.
	client := &http.Client{Timeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, req := range []func() (*http.Response, error){
				func() (*http.Response, error) { return client.Get(gateway + "/a") },
				func() (*http.Response, error) {
					return client.Post("http://"+rlsHTTP+"/json", "application/json",
						strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`))
				},
			} {
				if resp, err := req(); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	instances := []string{serveMetrics, rlsMetrics}
	// Normal operation: once Prometheus has scraped decisions of both
	// and evaluated the rules a few times, no alert is pending or firing.
	waitQuery(t, client, prom, `count(sum by (instance) (floodgate_decisions_total{outcome="allowed"}) > 0)`, 30*time.Second, func(r []promSample) bool {
		return len(r) == 1 && r[0].Value[1] == "2"
	})
	time.Sleep(5 * time.Second)
	if r, err := promVector(client, prom, `ALERTS`); err != nil || len(r) > 0 {
		t.Errorf("alerts during normal operation: %v %v", r, err)
	}

	// A version of the descriptor files that does not load.
	updateConfigMapVolume(t, serveDesc, 1, bad)
	updateConfigMapVolume(t, rlsDesc, 1, bad)
	waitAlert(t, client, prom, "FloodgateConfigRejected", instances)

	// Redis stops.
	stopRedis()
	waitAlert(t, client, prom, "FloodgateStoreBreakerOpen", instances)
	waitAlert(t, client, prom, "FloodgateDegradedDecisions", instances)
}

// promSample is one series of an instant query's answer.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// promVector asks Prometheus an instant query and returns its series.
func promVector(c *http.Client, prom, q string) ([]promSample, error) {
	resp, err := c.Get(prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", r.Error)
	}
	return r.Data.Result, nil
}

// waitQuery polls an instant query until ok holds for its answer.
func waitQuery(t *testing.T, c *http.Client, prom, q string, timeout time.Duration, ok func([]promSample) bool) {
	t.Helper()
	var last []promSample
	var err error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if last, err = promVector(c, prom, q); err == nil && ok(last) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: %v %v", q, last, err)
}

// waitAlert waits until the alert is pending or firing for every one of
// instances, and fails t otherwise, naming those it is not.
func waitAlert(t *testing.T, c *http.Client, prom, name string, instances []string) {
	t.Helper()
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := promVector(c, prom, fmt.Sprintf(`ALERTS{alertname=%q}`, name))
		missing = missing[:0]
		for _, in := range instances {
			if err != nil || !slices.ContainsFunc(r, func(s promSample) bool { return s.Metric["instance"] == in }) {
				missing = append(missing, in)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("alert %s is neither pending nor firing for %v after its fault (%v, %v)", name, missing, r, err)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
