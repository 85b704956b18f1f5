package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
func TestGuessedKeysAreThrottled(t *testing.T) {
	gw, admin, _ := school(t)
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
func TestForgedTokenIsRefused(t *testing.T) {
	gw, admin, logs := school(t)
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
		if o := r.Header.Get("X-HTTP-Method-Override"); o != "" {
			method = strings.ToUpper(o)
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
func TestPathAndMethodTricks(t *testing.T) {
	up, failed := normalizingUpstream(t)
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
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
`, up, up)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	gw, _, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
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
	// A GET that the upstream takes for a POST: the header is stripped.
	for range 5 {
		send("GET", "/login", "X-HTTP-Method-Override", "POST")
	}
	if n := failed.Load(); n > 5 {
		t.Errorf("%d failed logins reached the upstream past a limit of 5 (answers %v)", n, codes)
	}
	// And the real POSTs beyond the limit are refused.
	if code := send("POST", "/login"); code != 429 {
		t.Errorf("POST /login after the variants: %d, want 429", code)
	}
}
