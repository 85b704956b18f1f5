package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestUpstreamPool runs floodgate serve on both engines with a pool of
// three targets: one serves, one is killed (no connection: passive health
// ejects it), one answers but fails its health check (active health takes
// it out). Every request gets its answer from the one that serves, GETs
// and POSTs with a body alike (nothing was sent to the killed one, so
// each is retried), the metrics and /readyz say which targets are out,
// and the route's latency histograms count the requests.
func TestUpstreamPool(t *testing.T) { forEngines(t, testUpstreamPool) }

func testUpstreamPool(t *testing.T, engine string) {
	var good, sick atomic.Int64
	serving := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		good.Add(1)
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "good "+string(b))
	}))
	defer serving.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		sick.Add(1)
		_, _ = io.WriteString(w, "sick")
	}))
	defer failing.Close()
	killed := httptest.NewServer(http.NotFoundHandler())
	killed.Close()

	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: pool
    match: {paths: ["/**"]}
    upstreams: [%q, %q, %q]
    health: {path: /healthz, interval: 200ms, timeout: 150ms, unhealthy: 2, failures: 2, eject: 1m}
`, serving.URL, killed.URL, failing.URL))
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	healthy := func(target string) string {
		m := regexp.MustCompile(`(?m)^floodgate_upstream_target_healthy\{route="pool",target="` + regexp.QuoteMeta(target) + `"\} (\d)$`).
			FindStringSubmatch(metricsText(t, admin))
		if m == nil {
			return "none"
		}
		return m[1]
	}
	waitUntil(t, "the failing health check", 10*time.Second, func() bool { return healthy(failing.URL) == "0" })
	sickBefore := sick.Load()

	for i := range 40 {
		var resp *http.Response
		var err error
		if i%2 == 0 {
			resp, err = http.Get(gw + "/get")
		} else {
			resp, err = http.Post(gw+"/post", "text/plain", strings.NewReader("body-"+strconv.Itoa(i)))
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "good "
		if i%2 == 1 {
			want += "body-" + strconv.Itoa(i)
		}
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, b, want)
		}
	}
	if n := sick.Load() - sickBefore; n != 0 {
		t.Errorf("the target that fails its health check got %d requests", n)
	}
	if got := good.Load(); got != 40 {
		t.Errorf("the serving target got %d requests, want 40", got)
	}
	for target, want := range map[string]string{serving.URL: "1", killed.URL: "0", failing.URL: "0"} {
		if got := healthy(target); got != want {
			t.Errorf("floodgate_upstream_target_healthy of %s: %s, want %s", target, got, want)
		}
	}
	if code, _, body := get(t, admin+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz with one healthy target: %d %q", code, body)
	}
	text := metricsText(t, admin)
	for _, series := range []string{`floodgate_upstream_duration_seconds_count{route="pool"} 40`, `floodgate_gateway_duration_seconds_count{route="pool"} 40`} {
		if !strings.Contains(text, series+"\n") {
			t.Errorf("/metrics has no %s", series)
		}
	}

	// The last healthy target gone: /readyz says so.
	serving.Close()
	for range 2 {
		if resp, err := http.Get(gw + "/get"); err == nil {
			resp.Body.Close()
		}
	}
	waitUntil(t, "/readyz to tell of the pool", 10*time.Second, func() bool {
		_, _, body := get(t, admin+"/readyz")
		return strings.Contains(body, "route pool: no healthy upstream target")
	})
}

// TestCheckRefusesBadCertificatesAndEmptyPools: floodgate check names the
// position of a certificate file that is missing, of a key that is not
// the certificate's, and of a pool with no targets, all at once.
func TestCheckRefusesBadCertificatesAndEmptyPools(t *testing.T) {
	p := newGatewayPKI(t)
	path := filepath.Join(p.dir, "bad.yaml")
	if err := os.WriteFile(path, []byte(`server:
  tls:
    certs:
      - {cert: gone.crt, key: a.key}
      - {cert: a.crt, key: b.key}
  access: {deny: [203.0.113.7/24, 300.1.2.3]}
routes:
  - {name: pool, upstreams: []}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"check", "--config", path}, &out, &errOut)
	if code := exitCode(err); code != 1 {
		t.Fatalf("exit %d (%v), want 1", code, err)
	}
	for _, want := range []string{
		path + ":4:16: server.tls.certs[0].cert: cannot read the certificate",
		path + ":5:28: server.tls.certs[1].key: the key does not go with the certificate a.crt",
		path + ":6:19: server.access.deny[0]: 203.0.113.7/24 has host bits set; did you mean 203.0.113.0/24?",
		path + `:6:35: server.access.deny[1]: "300.1.2.3" is not a CIDR or an IP address`,
		path + ":8:29: routes[0].upstreams: a pool needs at least one target",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in:\n%v", want, err)
		}
	}
}
