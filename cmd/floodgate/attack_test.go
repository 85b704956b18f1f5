package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// school starts the README's command on free ports: the school example in
// front of the demo upstream.
func school(t *testing.T, extra ...string) (gw, admin string, logs *lockedBuffer) {
	t.Helper()
	args := append([]string{"--config", filepath.Join("..", "..", "examples", "school.yaml"), "--demo",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, extra...)
	gw, admin, _, _, logs = startServeLogged(t, args...)
	return gw, admin, logs
}

// metricsText reads /metrics.
func metricsText(t *testing.T, admin string) string {
	t.Helper()
	code, _, text := get(t, admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return text
}

// TestGuessedKeysAreThrottled: a flood of guessed API keys from one
// address passes the limits that need no key, and once the unknown-key
// limit (20 a minute, bursts of 20) is used up it is answered 429, not 403.
func TestGuessedKeysAreThrottled(t *testing.T) { forEngines(t, testGuessedKeysAreThrottled) }

func testGuessedKeysAreThrottled(t *testing.T, engine string) {
	gw, admin, _ := school(t, "--engine", engine)
	counts := map[int]int{}
	var last http.Header
	for i := range 30 {
		code, hdr, _ := get(t, gw+"/partner/students/9", "x-api-key", fmt.Sprintf("guess-%d", i))
		counts[code]++
		if code == 429 {
			last = hdr
		}
	}
	if counts[403] != 20 || counts[429] != 10 {
		t.Fatalf("guessed keys: %v, want 20 × 403 then 10 × 429", counts)
	}
	if last.Get("Retry-After") == "" || !strings.Contains(last.Get("RateLimit"), `"unknown-api-key";r=0`) {
		t.Errorf("429 fields: %v", last)
	}
	text := metricsText(t, admin)
	for _, want := range []string{
		`floodgate_rejections_total{code="403",front_end="gateway",limit=""} 20`,
		`floodgate_decisions_total{front_end="gateway",limit="unknown-api-key",outcome="denied"} 10`,
		`floodgate_decisions_total{front_end="gateway",limit="per-ip-flood",outcome="allowed"} 30`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// A known key is not held back by the guesses of the same address.
	if code, _, _ := get(t, gw+"/partner/students/9", "x-api-key", "key-partner-1"); code != 200 {
		t.Errorf("a valid key after the flood: %d", code)
	}
}

// TestForgedTokenIsRefused: a forged token on a route with a per-user limit
// is answered 401, counted by reason and logged, instead of skipping the
// per-user limit as an anonymous request.
func TestForgedTokenIsRefused(t *testing.T) { forEngines(t, testForgedTokenIsRefused) }

func testForgedTokenIsRefused(t *testing.T, engine string) {
	gw, admin, logs := school(t, "--engine", engine)
	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "parent-42", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte("not the school's secret, but long enough to sign"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		code, hdr, body := get(t, gw+"/notices/1", "Authorization", "Bearer "+forged)
		if code != 401 || !strings.Contains(body, "Unauthorized") || hdr.Get("WWW-Authenticate") == "" {
			t.Fatalf("forged token: %d %q %v", code, body, hdr)
		}
	}
	if code, _, _ := get(t, gw+"/notices/1", "Authorization", "Bearer not-a-jwt"); code != 401 {
		t.Errorf("malformed token: %d", code)
	}
	text := metricsText(t, admin)
	for _, want := range []string{
		`floodgate_invalid_tokens_total{reason="signature"} 3`,
		`floodgate_invalid_tokens_total{reason="malformed"} 1`,
		`floodgate_rejections_total{code="401",front_end="gateway",limit=""} 4`,
		`floodgate_decisions_total{front_end="gateway",limit="per-ip-flood",outcome="allowed"} 4`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if !strings.Contains(logs.String(), "invalid token") || !strings.Contains(logs.String(), "reason=signature") {
		t.Errorf("no log line for the invalid token:\n%s", logs.String())
	}
	// A request with no token at all is anonymous, as before.
	if code, _, _ := get(t, gw+"/notices/1"); code != 200 {
		t.Errorf("no token: %d", code)
	}
}

// normalizingUpstream answers like a lenient application server: it drops
// path parameters, ignores case and honours X-HTTP-Method-Override, and
// counts the failed logins that reach it.
func normalizingUpstream(t *testing.T) (url string, failedLogins *atomic.Int64) {
	t.Helper()
	failedLogins = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if i := strings.IndexByte(p, ';'); i >= 0 {
			p = p[:i]
		}
		p = path.Clean(strings.ToLower(strings.TrimSpace(p)))
		method := r.Method
		for _, o := range r.Header.Values("X-HTTP-Method-Override") { // the last line that names one
			if o = strings.TrimSpace(o); o != "" {
				method = strings.ToUpper(o)
			}
		}
		if method == "POST" && p == "/login" {
			failedLogins.Add(1)
			w.WriteHeader(401)
			return
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, failedLogins
}

// TestPathAndMethodTricks: spellings of /login that a lenient upstream
// takes for /login either meet the login limit or are refused with 400;
// a method override header does not dodge a POST-only limit.
func TestPathAndMethodTricks(t *testing.T) { forEngines(t, testPathAndMethodTricks) }

func testPathAndMethodTricks(t *testing.T, engine string) {
	up, failed := normalizingUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  path_matching: case_insensitive
routes:
  - name: login
    match: {methods: [POST], paths: ["/login"]}
    upstream: %s
  - name: other
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: login
    match: {methods: [POST], paths: ["/login"]}
    algorithm: fixed_window
    limit: 5
    window: 1h
    key: client_ip
`, up, up))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	send := func(method, target string, hdr ...string) int {
		t.Helper()
		// A raw request line, so that the target reaches the gateway as
		// written (no client-side cleaning).
		c, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := method + " " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n"
		for i := 0; i+1 < len(hdr); i += 2 {
			req += hdr[i] + ": " + hdr[i+1] + "\r\n"
		}
		if _, err := io.WriteString(c, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	codes := map[string]int{}
	spellings := []string{"/LOGIN", "/Login;jsessionid=1", "/login;x", "/login/", "//login", "/x/../login", "/LoGiN/"}
	for i := range 3 * len(spellings) {
		target := spellings[i%len(spellings)]
		codes[target] = send("POST", target)
	}
	for _, target := range []string{"/login%00", "/login%5C", "/login\\", "/..;/login", "/login%20", "/%20login", "/login%09"} {
		codes[target] = send("POST", target)
	}
	for _, target := range []string{"/login%00", "/login%5C", "/login\\", "/..;/login", "/login%20", "/%20login", "/login%09"} {
		if codes[target] != 400 {
			t.Errorf("POST %s: %d, want 400", target, codes[target])
		}
	}
	// A GET that the upstream takes for a POST: the header is stripped,
	// whatever line of it names the method.
	for range 5 {
		send("GET", "/login", "X-HTTP-Method-Override", "POST")
		send("GET", "/login", "X-HTTP-Method-Override", "", "X-HTTP-Method-Override", "POST")
	}
	if n := failed.Load(); n > 5 {
		t.Errorf("%d failed logins reached the upstream past a limit of 5 (answers %v)", n, codes)
	}
	// And the real POSTs beyond the limit are refused.
	if code := send("POST", "/login"); code != 429 {
		t.Errorf("POST /login after the variants: %d, want 429", code)
	}
}

// TestSlowBodiesKeepTheirLeasesAndAreCut: two clients trickle their bodies
// far past the concurrency lease's lifetime; their leases hold (a limit of
// 2 admits no third request meanwhile) until the read timeout cuts them,
// and then the slots are free again.
func TestSlowBodiesKeepTheirLeasesAndAreCut(t *testing.T) {
	t.Parallel() // it waits for timeouts, not on the CPU
	forEngines(t, testSlowBodiesKeepTheirLeasesAndAreCut)
}

func testSlowBodiesKeepTheirLeasesAndAreCut(t *testing.T, engine string) {
	var inUpstream atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inUpstream.Add(1)
		defer inUpstream.Add(-1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  timeouts: {read_header: 1s, read: 5s}
routes:
  - name: upload
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: uploads
    algorithm: concurrency
    limit: 2
    lease_ttl: 300ms
    key: global
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "http://")
	cut := make(chan error, 2)
	sent := time.Now() // the read timeout (5 s) runs from here
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx"); err != nil {
			t.Fatal(err)
		}
		go func() {
			// One byte every 100 ms until the gateway cuts the request.
			for {
				time.Sleep(100 * time.Millisecond)
				if _, err := c.Write([]byte("x")); err != nil {
					cut <- err
					return
				}
				if b := make([]byte, 1); c.SetReadDeadline(time.Now().Add(time.Millisecond)) == nil {
					if _, err := c.Read(b); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						cut <- err
						return
					}
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for inUpstream.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the slow requests never reached the upstream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Many lease lifetimes pass while both are still in flight: every
	// other request is refused.
	started := time.Now()
	for inUpstream.Load() == 2 && time.Since(started) < 2500*time.Millisecond {
		if code, _, _ := get(t, gw+"/fast"); code != 429 {
			if time.Since(sent) >= 4500*time.Millisecond {
				// On a loaded machine the uploads reached the upstream
				// late, and the read timeout may have cut them (and
				// freed their slots) while this request was on its way.
				break
			}
			t.Fatalf("after %v with 2 uploads in flight a third got %d", time.Since(started).Round(time.Millisecond), code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if time.Since(started) < time.Second {
		t.Fatalf("the uploads ended after %v, before their leases were at risk", time.Since(started))
	}
	for range 2 {
		select {
		case <-cut:
		case <-time.After(20 * time.Second):
			t.Fatal("a slow request was never cut by the read timeout")
		}
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		code, _, _ := get(t, gw+"/fast")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the uploads were cut: %d, want 200 (leases released)", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConnectionFlood: past max_connections a new connection is answered
// 503 and closed at once, the admin listener keeps answering, and slow
// requests to one upstream wait for its capped connections instead of
// failing with 502.
func TestConnectionFlood(t *testing.T) { forEngines(t, testConnectionFlood) }

func testConnectionFlood(t *testing.T, engine string) {
	release := make(chan struct{})
	var upstreamConns atomic.Int64
	var peak atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			if n := upstreamConns.Add(1); n > peak.Load() {
				peak.Store(n)
			}
		case http.StateClosed, http.StateHijacked:
			upstreamConns.Add(-1)
		}
	}
	up.Start()
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  max_connections: 20
  upstream: {max_conns_per_host: 4}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "http://")

	// Ten slow requests hold ten client connections; only four upstream
	// connections are opened for them.
	results := make(chan int, 10)
	for range 10 {
		go func() {
			resp, err := http.Get(gw + "/slow")
			if err != nil {
				results <- -1
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(metricsText(t, admin), "floodgate_connections_open 10\n") {
		if time.Now().After(deadline) {
			t.Fatal("the ten slow requests did not all connect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Thirty idle connections more: the ones past 20 are refused with 503.
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	shed := 0
	for range 30 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			if resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "" {
				shed++
			}
			resp.Body.Close()
		}
	}
	if shed != 20 {
		t.Errorf("%d of 30 extra connections were answered 503; with 10 busy and a cap of 20, want 20", shed)
	}
	if code, _, _ := get(t, admin+"/healthz"); code != 200 {
		t.Errorf("/healthz during the flood: %d", code)
	}
	if _, _, text := get(t, admin+"/metrics"); !strings.Contains(text, fmt.Sprintf("floodgate_connections_shed_total{listener=\"gateway\"} %d\n", shed)) {
		t.Errorf("/metrics does not count the %d connections shed: %q", shed, grepLines(text, "floodgate_connections_shed_total"))
	}
	close(release)
	for range 10 {
		if code := <-results; code != 200 {
			t.Errorf("a slow request got %d, want 200 (it waits for an upstream connection)", code)
		}
	}
	if p := peak.Load(); p > 4 {
		t.Errorf("%d upstream connections were open at once; the cap is 4", p)
	}
}

// TestHTTP2PriorKnowledge: a client speaking HTTP/2 without TLS is served,
// and the upstream never sees a request with the method PRI.
func TestHTTP2PriorKnowledge(t *testing.T) { forEngines(t, testHTTP2PriorKnowledge) }

func testHTTP2PriorKnowledge(t *testing.T, engine string) {
	var methods sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methods.Store(r.Method, true)
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(gw + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("h2c: %d over %s", resp.StatusCode, resp.Proto)
	}
	if _, pri := methods.Load("PRI"); pri {
		t.Error("the upstream got a PRI request")
	}
}

// TestH2CPerAddressLimit: requests over HTTP/2 without TLS (prior
// knowledge) count on the same per-address limit as HTTP/1.1 ones: after
// 2 of 5 over HTTP/1.1 and one over h2c, 20 streams at once on the h2c
// connection get exactly 2 answers from the upstream and 18 429s with
// Retry-After, and HTTP/1.1 is refused after them.
func TestH2CPerAddressLimit(t *testing.T) { forEngines(t, testH2CPerAddressLimit) }

func testH2CPerAddressLimit(t *testing.T, engine string) {
	var reached atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 5, window: 1h, key: client_ip}
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	for i := range 2 {
		if code, _, _ := get(t, gw+"/x"); code != 200 {
			t.Fatalf("HTTP/1.1 request %d: %d", i+1, code)
		}
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	h2c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	// One connection first, so that the 20 streams share it.
	if resp, err := h2c.Head(gw + "/nothing-here-is-free"); err == nil {
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("h2c: answered over %s", resp.Proto)
		}
	} else {
		t.Fatal(err)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			resp, err := h2c.Get(gw + "/x")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 {
				t.Errorf("h2c: answered over %s", resp.Proto)
			}
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				t.Error("h2c 429 without Retry-After")
			}
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	// The HEAD above took the third of the five.
	if codes[200] != 2 || codes[429] != 18 || len(codes) != 2 {
		t.Errorf("20 h2c streams after 3 of 5 were spent: %v, want 2 × 200 and 18 × 429", codes)
	}
	if code, _, _ := get(t, gw+"/x"); code != 429 {
		t.Errorf("HTTP/1.1 after the h2c streams: %d, want 429", code)
	}
	if n := reached.Load(); n != 5 {
		t.Errorf("the upstream got %d requests, want 5", n)
	}
}

// TestReadyzReportsDegradedState: /readyz says "degraded" with its reasons
// while the store does not answer and while the state file cannot be
// written, and /metrics shows both; "?strict" answers 503 then.
func TestReadyzReportsDegradedState(t *testing.T) { forEngines(t, testReadyzReportsDegradedState) }

func testReadyzReportsDegradedState(t *testing.T, engine string) {
	t.Run("state file", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "state"), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, "gw.yaml")
		err := os.WriteFile(cfg, []byte(`version: 1
server:
  state_file: state/counts.state
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: cap, algorithm: fixed_window, limit: 100, window: 1h, key: global}
`), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
		if code, _, body := get(t, admin+"/readyz"); code != 200 || body != "ready\n" {
			t.Fatalf("/readyz at start: %d %q", code, body)
		}
		if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			get(t, gw+"/x") // a change for the next snapshot to write
			code, _, body := get(t, admin+"/readyz")
			if code == 200 && strings.HasPrefix(body, "degraded: the state file cannot be written") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never said the state file fails: %d %q", code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if code, _, _ := get(t, admin+"/readyz?strict"); code != 503 {
			t.Errorf("/readyz?strict while degraded: %d", code)
		}
		if !strings.Contains(metricsText(t, admin), `floodgate_state_file_failing{store="main"} 1`) {
			t.Error("/metrics does not show the failing state file")
		}
	})
	t.Run("store down", func(t *testing.T) {
		rs := redistest.Start(t)
		cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  store: redis://%s/0
  store_timeout: 100ms
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: cap, algorithm: fixed_window, limit: 1000, window: 1h, key: global, on_failure: allow}
`, rs.Addr))
		gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
		get(t, gw+"/x")
		rs.Kill()
		deadline := time.Now().Add(30 * time.Second)
		for {
			get(t, gw+"/x")
			code, _, body := get(t, admin+"/readyz")
			if code == 200 && strings.Contains(body, "circuit breaker open") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never said the store is down: %d %q", code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if code, _, _ := get(t, admin+"/readyz?strict"); code != 503 {
			t.Errorf("/readyz?strict with the store down: %d", code)
		}
		if !strings.Contains(metricsText(t, admin), "floodgate_breaker_open 1\n") {
			t.Error("/metrics does not show the open breaker")
		}
	})
}

// TestFloodsOfDistinctKeysAreBounded: distinct client addresses through the
// gateway, distinct keys through the check API and huge descriptor values
// through the Envoy rate-limit service all land in one memory-bounded
// store: its bytes stay within server.memory.max_bytes.
func TestFloodsOfDistinctKeysAreBounded(t *testing.T) {
	forEngines(t, testFloodsOfDistinctKeysAreBounded)
}

func testFloodsOfDistinctKeysAreBounded(t *testing.T, engine string) {
	dir := t.TempDir()
	grpcAddr, apiAddr := anyPort, anyPort
	if err := os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gw.yaml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  trusted_proxies: [127.0.0.1]
  grpc_listen: %q
  rls_config: [rls.yaml]
  api_listen: %q
  api_auth: none
  memory: {max_bytes: 1048576}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 100, window: 1h, key: client_ip, scope: global}
`, grpcAddr, apiAddr)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	gw, admin, _, out := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	grpcAddr, apiAddr = listenedOn(t, out.String(), rlsOn), listenedOn(t, out.String(), apiOn)
	const n = 12000
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				req, _ := http.NewRequest("GET", gw+"/x", nil)
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				body := fmt.Sprintf(`{"limit":"per-ip","key":"k-%d-%s"}`, i, strings.Repeat("z", 400))
				if resp, err := client.Post("http://"+apiAddr+"/v1/check", "application/json", strings.NewReader(body)); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	big := strings.Repeat("v", 60<<10)
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: fmt.Sprint(i) + big}}}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	text := metricsText(t, admin)
	var bytes, evicted float64
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, `floodgate_store_bytes{store="main"} `); ok {
			fmt.Sscan(v, &bytes)
		}
		if v, ok := strings.CutPrefix(line, `floodgate_store_evictions_total{store="main"} `); ok {
			fmt.Sscan(v, &evicted)
		}
	}
	if bytes <= 0 || bytes > 1<<20 {
		t.Errorf("store bytes %v after the floods; the bound is 1 MiB", bytes)
	}
	if evicted == 0 {
		t.Errorf("no key was evicted: the floods did not reach the bound (bytes %v)", bytes)
	}
}

// TestEvictableRedis: a Redis that may evict the limiter's keys is shown on
// /metrics (and logged) by default, and refused at start with
// redis_eviction: refuse.
func TestEvictableRedis(t *testing.T) {
	rs, err := redistest.StartServer(redistest.Config{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)
	write := func(extra string) string {
		cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  store: redis://%s/0
%s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
`, rs.Addr, extra))
		return cfg
	}
	_, admin, _, _, logs := startServeLogged(t, "--config", write(""), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	if !strings.Contains(metricsText(t, admin), "floodgate_store_evictable 1\n") {
		t.Error("/metrics does not show the evictable Redis")
	}
	if !strings.Contains(logs.String(), "allkeys-lru") {
		t.Errorf("no warning names the policy:\n%s", logs.String())
	}
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"serve", "--config", write("  redis_eviction: refuse"), "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--log-level", "error"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Errorf("redis_eviction: refuse started or said %v", err)
	}
}
