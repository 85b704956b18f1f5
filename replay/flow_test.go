package replay

import (
	"context"
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
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/golang-jwt/jwt/v5"
)

// The gateway, Explain and the replay decide a request through one
// admission flow: fed one recorded set of requests (API keys with and
// without "Bearer ", unknown keys, tokens good and forged, limits counted
// by outcome, reservations), the three give the same answer to each.

// flowSecret is the HS256 secret of flowPolicy's tokens.
const flowSecret = "a-secret-of-at-least-thirty-two-bytes!"

// flowPolicy is a policy with every kind of identity and charge, its
// routes forwarded to upstream.
func flowPolicy(t *testing.T, upstream string) *policy.Policy {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(flowSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("key-1"))
	src := fmt.Sprintf(`version: 1
server:
  api_key_header: x-api-key
  user: {jwt: {alg: HS256, key_file: secret.txt}}
  unknown_key_limit: {algorithm: sliding_log, limit: 2, window: 1h}
routes:
  - {name: partner, match: {paths: ["/partner/**"]}, upstream: %[1]q, api_key_required: true}
  - {name: me, match: {paths: ["/me"]}, upstream: %[1]q}
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: %[1]q}
  - {name: chat, match: {paths: ["/v1/chat"]}, upstream: %[1]q}
plans:
  - {name: gold, rate: 3, per: 1h}
keys:
  - {name: k1, plan: gold, sha256: %[2]s}
limits:
  - {name: per-user, algorithm: sliding_log, limit: 2, window: 1h, key: user, match: {routes: [me]}}
  - {name: login, algorithm: sliding_log, limit: 2, window: 1h, key: client_ip, count_on: [401], match: {routes: [login]}}
  - {name: tokens, algorithm: sliding_log, limit: 250, window: 1h, key: global, match: {routes: [chat]}, estimate: {header: X-Max, default: 100}, actual: {header: X-Used}}
  - {name: per-ip, rate: 1000, per: 1h, key: client_ip, scope: global}
`, upstream, hex.EncodeToString(sum[:]))
	path := filepath.Join(dir, "flow.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// flowRequest is one request of the recorded set: what the client sends
// and what the upstream answers when it gets it.
type flowRequest struct {
	method, path string
	header       map[string]string
	upstream     int // the upstream's status
}

func flowToken(t *testing.T, user, secret string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// flowRequests is the recorded set.
func flowRequests(t *testing.T) []flowRequest {
	good := "Bearer " + flowToken(t, "ana", flowSecret)
	forged := "Bearer " + flowToken(t, "ana", strings.Repeat("x", 40))
	get := func(path string, upstream int, hdr ...string) flowRequest {
		h := map[string]string{}
		for i := 0; i+1 < len(hdr); i += 2 {
			h[hdr[i]] = hdr[i+1]
		}
		return flowRequest{"GET", path, h, upstream}
	}
	post := func(path string, upstream int, hdr ...string) flowRequest {
		r := get(path, upstream, hdr...)
		r.method = "POST"
		return r
	}
	return []flowRequest{
		get("/partner/a", 200, "X-Api-Key", "key-1"),
		get("/partner/a", 200, "X-Api-Key", "Bearer key-1"), // the key with its scheme: the same key
		get("/partner/a", 200, "X-Api-Key", "bearer  key-1"),
		get("/partner/a", 200, "X-Api-Key", "key-1"), // the plan's 3 an hour are used up: 429
		get("/partner/a", 200, "X-Api-Key", "key-2"), // unknown: 403, counted by the unknown-key limit
		get("/partner/a", 200),                       // no key: 403
		get("/partner/a", 200, "X-Api-Key", "key-3"), // the unknown-key limit's 2 are used up: 429
		get("/me", 200, "Authorization", good),
		get("/me", 200, "Authorization", forged), // 401, after the limits that need no user
		get("/me", 200, "Authorization", good),
		get("/me", 200, "Authorization", good), // the user's 2 are used up: 429
		get("/me", 200),                        // anonymous: no per-user limit
		post("/login", 401),
		post("/login", 200), // not counted
		post("/login", 401),
		post("/login", 401),  // two failures counted: 429
		get("/v1/chat", 200), // reserves 100, keeps it (no usage told)
		get("/v1/chat", 500), // reserves 100, gives it back (not a success)
		get("/v1/chat", 200), // 200 of 250 held
		get("/v1/chat", 200), // 100 more would be 300: 429
		get("/nowhere", 200), // no route: the limits that apply, then 404
	}
}

// TestOneFlowThreeWays feeds the recorded set to the gateway (explaining
// each request on it just before it is served) and then its access log to
// the replay: the explanation, the gateway and the replay answer each
// request alike.
func TestOneFlowThreeWays(t *testing.T) {
	reqs := flowRequests(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.Header.Get("X-Test-Status"))
		w.WriteHeader(code)
	}))
	defer up.Close()
	p := flowPolicy(t, up.URL)

	// The store's clock is the wall clock, read at every decision (not
	// the embedded store's default, which may lag it by a millisecond):
	// the access log's times and durations are then exact, and a request
	// that ended before the next began is logged so. No limit has a
	// window that ends, or refills, within the test.
	st, err := memstore.New(memstore.Options{Now: func() int64 { return time.Now().UnixNano() }, SweepInterval: -1, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := &recordLog{}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, limiter.Options{}), AccessLog: log})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()

	gatewayAnswers := make([]int, len(reqs))
	explained := make([]int, len(reqs))
	for i, q := range reqs {
		hreq, _ := http.NewRequest(q.method, front.URL+q.path, nil)
		for k, v := range q.header {
			hreq.Header.Set(k, v)
		}
		hreq.Header.Set("X-Test-Status", strconv.Itoa(q.upstream))
		// Explain first, on the gateway that then serves the request: the
		// explanation charges nothing.
		ereq := hreq.Clone(context.Background())
		ereq.RemoteAddr = "127.0.0.1:50000"
		e, err := g.Explain(context.Background(), ereq, gateway.ExplainOptions{})
		if err != nil {
			t.Fatalf("request %d: explain: %v", i, err)
		}
		explained[i] = e.Answer.Status
		if e.Answer.Forwarded {
			explained[i] = q.upstream
		}
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		gatewayAnswers[i] = resp.StatusCode
		log.wait(t, i+1)
	}

	// The replay, from the gateway's access log.
	rp, err := NewReplayer(p)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	replayed := make([]int, len(reqs))
	var logFile []byte
	for i := range reqs {
		lr := log.get(i)
		logFile = accesslog.AppendJSON(logFile, &lr)
		rec := Record{Time: lr.Time.UnixNano(), ClientIP: lr.ClientIP, Method: lr.Method, Host: lr.Host, Path: lr.Path,
			Status: lr.Status, Duration: lr.Duration, Key: lr.Key, User: lr.User, Logged: LoggedAllow}
		if lr.Decision == accesslog.Deny {
			rec.Logged = LoggedDeny
		}
		o := rp.Decide(&rec)
		switch {
		case o.Denied:
			replayed[i] = http.StatusTooManyRequests
		case o.Forbidden:
			replayed[i] = http.StatusForbidden
		default:
			replayed[i] = lr.Status // the upstream's answer, or the gateway's 401 or 404 after the limits
		}
	}
	want := []int{200, 200, 200, 429, 403, 403, 429, 200, 401, 200, 429, 200, 401, 200, 401, 429, 200, 500, 200, 429, 404}
	for i := range reqs {
		if gatewayAnswers[i] != want[i] || explained[i] != gatewayAnswers[i] || replayed[i] != gatewayAnswers[i] {
			t.Errorf("request %d (%s %s %v): gateway %d, explain %d, replay %d; want %d",
				i, reqs[i].method, reqs[i].path, reqs[i].header, gatewayAnswers[i], explained[i], replayed[i], want[i])
		}
	}
	// And Run, reading the log as written, agrees with every logged
	// decision.
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, logFile, 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{path}})
	if a := r.Agreement; a.Compared != int64(len(reqs)) || a.Matched != a.Compared {
		t.Errorf("replay agreement: %d of %d compared match: %+v", a.Matched, a.Compared, a.Mismatches)
	}
}

// recordLog is an access log that keeps copies of its records.
type recordLog struct {
	mu   sync.Mutex
	recs []accesslog.Record
}

func (l *recordLog) Log(r *accesslog.Record) {
	l.mu.Lock()
	l.recs = append(l.recs, *r)
	l.mu.Unlock()
}

func (l *recordLog) get(i int) accesslog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recs[i]
}

// wait waits until n records were logged.
func (l *recordLog) wait(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		got := len(l.recs)
		l.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records logged, want %d", got, n)
		}
	}
}
