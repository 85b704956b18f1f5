package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/floodgate/floodgate/guard"
)

// guardedService is the service of TestGuardDecidesAsServe, the upstream
// of floodgate serve and the handler of the Guard alike: POST /login
// without the right password is 401, anything else 200 with its path.
var guardedService = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/login" && r.Header.Get("X-Password") != "right" {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "wrong password\n")
		return
	}
	io.WriteString(w, "ok "+r.URL.Path+"\n")
})

// guardAnswer is what a client sees of one answer, as compared.
type guardAnswer struct {
	status                              int
	body, policy, rateLimit, retry, www string
}

func (a guardAnswer) String() string {
	return fmt.Sprintf("%d %q RateLimit-Policy=%q RateLimit=%q Retry-After=%q WWW-Authenticate=%q",
		a.status, a.body, a.policy, a.rateLimit, a.retry, a.www)
}

// sameAnswer reports whether two answers are the same, the seconds of
// RateLimit's t and of Retry-After allowed to differ by one (the two
// answers are a few milliseconds apart, and may fall on either side of a
// second).
func sameAnswer(a, b guardAnswer) bool {
	if a.status != b.status || a.body != b.body || a.policy != b.policy || a.www != b.www {
		return false
	}
	if !closeSeconds(a.retry, b.retry) {
		return false
	}
	ia, ib := strings.Split(a.rateLimit, ", "), strings.Split(b.rateLimit, ", ")
	if len(ia) != len(ib) {
		return false
	}
	for i := range ia {
		ra, ta, _ := strings.Cut(ia[i], ";t=")
		rb, tb, _ := strings.Cut(ib[i], ";t=")
		if ra != rb || !closeSeconds(ta, tb) {
			return false
		}
	}
	return true
}

// closeSeconds reports whether two whole numbers of seconds are both
// absent or differ by at most one.
func closeSeconds(a, b string) bool {
	if a == b {
		return true
	}
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	return errA == nil && errB == nil && x-y <= 1 && y-x <= 1
}

// TestGuardDecidesAsServe: a program that wraps its handler in two lines
// (guard.New, Middleware) gets, request after request, the decisions
// floodgate serve makes with the same policy file in front of the same
// service, on either of serve's HTTP engines: stage and per-client rate
// limits, a plan's quota, 403 for a missing or unknown API key, a
// login limit counting only 401s, per-user limits from verified tokens
// and 401 for a forged one, clients told apart by X-Forwarded-For from a
// trusted proxy. Every limit refills slowly (per hour or day), so that
// the few milliseconds between the two requests of a step change nothing.
func TestGuardDecidesAsServe(t *testing.T) {
	for _, engine := range []string{"fast", "net/http"} {
		t.Run(strings.ReplaceAll(engine, "/", ""), func(t *testing.T) {
			guardDecidesAsServe(t, engine)
		})
	}
}

func guardDecidesAsServe(t *testing.T, engine string) {
	up := httptest.NewServer(guardedService)
	t.Cleanup(up.Close)
	dir := t.TempDir()
	secret := []byte("a test secret of at least 32 bytes, not a real one")
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("key-trial"))
	cfg := filepath.Join(dir, "policy.yaml")
	policy := fmt.Sprintf(`version: 1
server:
  trusted_proxies: [127.0.0.1/32, "::1/128"]
  api_key_header: x-api-key
  unknown_key_limit: {rate: 3, per: 1h}
  user:
    jwt: {alg: HS256, key_file: secret.txt}
routes:
  - {name: login, match: {methods: [POST], paths: [/login]}, upstream: %[1]s}
  - {name: partner, match: {paths: ["/partner/**"]}, upstream: %[1]s, api_key_required: true}
  - {name: me, match: {paths: ["/me/**"]}, upstream: %[1]s}
  - {name: rest, match: {paths: ["/**"]}, upstream: %[1]s, stage: dev}
stages:
  - {name: dev, rate: 6, per: 1h}
plans:
  - {name: trial, rate: 100, per: 1h, quota: {limit: 2, period: DAY, time_zone: Asia/Kolkata}, routes: [partner]}
keys:
  - {name: trial-1, plan: trial, sha256: %[2]s}
limits:
  - {name: login, algorithm: sliding_log, limit: 2, window: 1h, match: {methods: [POST], paths: [/login]}, count_on: [401], scope: method}
  - {name: per-user, rate: 2, per: 1h, key: user, match: {routes: [me]}}
  - {name: per-client, rate: 4, per: 1h, match: {paths: ["/**"]}}
`, up.URL, hex.EncodeToString(sum[:]))
	if err := os.WriteFile(cfg, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")

	// The two lines.
	g, err := guard.New(guard.File(cfg), guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	h := g.Middleware(guardedService)

	lib := httptest.NewServer(h)
	t.Cleanup(lib.Close)

	token := func(user string, key []byte) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	alice, forged := token("alice", secret), token("alice", []byte("another secret of at least 32 bytes!!"))
	type step struct {
		method, path string
		client       string // the address X-Forwarded-For names
		header       []string
	}
	var steps []step
	for i := 0; i < 6; i++ { // per-client 4 an hour, then 429
		steps = append(steps, step{"GET", "/students/" + strconv.Itoa(i), "203.0.113.1", nil})
	}
	for i := 0; i < 4; i++ { // the stage's 6 an hour are used up by the others
		steps = append(steps, step{"GET", "/students/9", "203.0.113.2", nil})
	}
	steps = append(steps,
		step{"GET", "/partner/students/9", "203.0.113.3", nil},                                 // no key: 403
		step{"GET", "/partner/students/9", "203.0.113.3", []string{"X-Api-Key", "key-nobody"}}, // unknown: 403
		step{"GET", "/partner/students/9", "203.0.113.3", []string{"X-Api-Key", "key-nobody"}}, // unknown-key limit: 429
		step{"GET", "/partner/students/9", "203.0.113.4", []string{"X-Api-Key", "key-trial"}},
		step{"GET", "/partner/students/9", "203.0.113.4", []string{"X-Api-Key", "key-trial"}},
		step{"GET", "/partner/students/9", "203.0.113.4", []string{"X-Api-Key", "key-trial"}}, // quota: Limit Exceeded
		step{"POST", "/login", "203.0.113.5", []string{"X-Password", "right"}},                // not counted
		step{"POST", "/login", "203.0.113.5", nil},
		step{"POST", "/login", "203.0.113.5", nil},
		step{"POST", "/login", "203.0.113.5", []string{"X-Password", "right"}}, // two failures: 429
		step{"GET", "/me/notices", "203.0.113.6", []string{"Authorization", alice}},
		step{"GET", "/me/notices", "203.0.113.7", []string{"Authorization", alice}},  // the same user elsewhere
		step{"GET", "/me/notices", "203.0.113.8", []string{"Authorization", alice}},  // per-user: 429
		step{"GET", "/me/notices", "203.0.113.6", []string{"Authorization", forged}}, // 401
		step{"GET", "/me/notices", "203.0.113.6", nil},                               // anonymous: per-client only
	)

	client := &http.Client{Timeout: 10 * time.Second}
	send := func(base string, s step) guardAnswer {
		t.Helper()
		req, err := http.NewRequest(s.method, base+s.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", s.client)
		for i := 0; i+1 < len(s.header); i += 2 {
			req.Header.Set(s.header[i], s.header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return guardAnswer{resp.StatusCode, strings.TrimSpace(string(body)), resp.Header.Get("RateLimit-Policy"),
			resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate")}
	}
	seen := map[string]bool{}
	for i, s := range steps {
		want, got := send(gw, s), send(lib.URL, s)
		if !sameAnswer(got, want) {
			t.Errorf("step %d: %s %s from %s %v:\n  guard %v\n  serve %v", i, s.method, s.path, s.client, s.header, got, want)
		}
		seen[strconv.Itoa(got.status)+" "+got.body] = true
	}
	// The sequence met every kind of answer.
	for _, want := range []string{"200 ok /students/0", `429 {"message":"Too Many Requests"}`, `429 {"message":"Limit Exceeded"}`,
		`403 {"message":"Forbidden"}`, `401 {"message":"Unauthorized"}`, "401 wrong password"} {
		if !seen[want] {
			t.Errorf("no answer %s in the sequence: %v", want, seen)
		}
	}
}
