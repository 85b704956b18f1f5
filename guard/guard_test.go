package guard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/store/memstore"
)

// answer is what a client sees of one response.
type answer struct {
	status                    int
	body, policy, rl, retryAt string
}

func (a answer) String() string {
	return fmt.Sprintf("%d %q policy=%q ratelimit=%q retry-after=%q", a.status, a.body, a.policy, a.rl, a.retryAt)
}

// do sends one request and reads its answer.
func do(t *testing.T, c *http.Client, method, url string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, strings.TrimSpace(string(body)), resp.Header.Get("RateLimit-Policy"),
		resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After")}
}

// service answers 401 to a POST /login without the right password, and
// 200 with its path to anything else.
var service = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/login" && r.Header.Get("X-Password") != "right" {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "wrong password")
		return
	}
	io.WriteString(w, "ok "+r.URL.Path)
})

// serveGuard serves service behind g on loopback and returns its URL.
func serveGuard(t *testing.T, g *guard.Guard) string {
	t.Helper()
	srv := httptest.NewServer(g.Middleware(service))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newGuard(t *testing.T, src guard.Source, o guard.Options) *guard.Guard {
	t.Helper()
	g, err := guard.New(src, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestLimitsDecideAsTheFile: limits written in code give, request after
// request, the answers the same limits written in a policy file give,
// whatever their algorithms, keys, matches, costs and count_on.
func TestLimitsDecideAsTheFile(t *testing.T) {
	t.Parallel()
	limits := []guard.Limit{
		{Name: "login", Algorithm: floodgate.SlidingLog, Max: 2, Window: time.Hour, Methods: []string{"POST"},
			Paths: []string{"/login"}, CountOn: []int{401}, OnFailure: floodgate.FailClosed},
		{Name: "reports", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour, Paths: []string{"/reports/**"}, Cost: 2},
		{Name: "tenant", Rate: 4, Per: time.Hour, Burst: 6, Key: "header:X-Tenant, route"},
		{Name: "watch", Rate: 1, Per: time.Hour, Shadow: true},
		{Name: "daily", Period: floodgate.Day, Max: 9, TimeZone: "Asia/Kolkata"},
	}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, `version: 1
limits:
  - {name: login, algorithm: sliding_log, limit: 2, window: 1h, match: {methods: [POST], paths: [/login]}, count_on: [401], on_failure: deny}
  - {name: reports, algorithm: fixed_window, limit: 5, window: 1h, match: {paths: ["/reports/**"]}, cost: 2}
  - {name: tenant, rate: 4, per: 1h, burst: 6, key: ["header:X-Tenant", route]}
  - {name: watch, rate: 1, per: 1h, shadow: true}
  - {name: daily, period: day, limit: 9, time_zone: Asia/Kolkata}
`)
	inCode := serveGuard(t, newGuard(t, guard.Limits(limits...), guard.Options{}))
	fromFile := serveGuard(t, newGuard(t, guard.File(file), guard.Options{ReloadInterval: -1}))
	type step struct {
		method, path string
		header       map[string]string
	}
	a, b := map[string]string{"X-Tenant": "a"}, map[string]string{"X-Tenant": "b"}
	steps := []step{
		{"POST", "/login", a}, {"POST", "/login", map[string]string{"X-Tenant": "a", "X-Password": "right"}},
		{"POST", "/login", a}, {"POST", "/login", a},
		{"GET", "/reports/1", b}, {"GET", "/reports/2", b}, {"GET", "/reports/3", b},
		{"GET", "/x", a}, {"GET", "/x", a}, {"GET", "/x", a}, {"GET", "/x", a},
		{"GET", "/y", nil}, {"GET", "/y", nil}, {"GET", "/y", b},
	}
	c := &http.Client{}
	statuses := map[int]int{}
	for i, s := range steps {
		before := time.Now().Unix()
		got, want := do(t, c, s.method, inCode+s.path, s.header), do(t, c, s.method, fromFile+s.path, s.header)
		if got != want && !(time.Now().Unix() != before && sameButASecond(got, want)) {
			t.Errorf("step %d (%s %s %v):\n in code %v\n file    %v", i, s.method, s.path, s.header, got, want)
		}
		statuses[got.status]++
	}
	// The sequence reaches every kind of answer: passed, counted as a
	// failed login, refused by a limit.
	if statuses[200] == 0 || statuses[401] == 0 || statuses[429] == 0 {
		t.Errorf("statuses %v: want 200, 401 and 429 among them", statuses)
	}
}

// sameButASecond reports whether a and b differ only in the seconds to
// their limits' resets (t= of RateLimit) and in Retry-After, each by at
// most one: two answers asked for on either side of a second's end (a
// window ends on a whole second, so the later answer's reset is one
// second nearer).
func sameButASecond(a, b answer) bool {
	secs := regexp.MustCompile(`t=\d+|^\d+$`)
	near := func(x, y string) bool {
		ta, na := secs.Split(x, -1), secs.FindAllString(x, -1)
		tb, nb := secs.Split(y, -1), secs.FindAllString(y, -1)
		if !slices.Equal(ta, tb) || len(na) != len(nb) {
			return false
		}
		for i := range na {
			p, _ := strconv.Atoi(strings.TrimPrefix(na[i], "t="))
			q, _ := strconv.Atoi(strings.TrimPrefix(nb[i], "t="))
			if p-q > 1 || q-p > 1 {
				return false
			}
		}
		return true
	}
	if !near(a.rl, b.rl) || !near(a.retryAt, b.retryAt) {
		return false
	}
	a.rl, a.retryAt, b.rl, b.retryAt = "", "", "", ""
	return a == b
}

// TestLimitsProblems: limits that break the file's rules are refused,
// every problem at its field, with no position in a file no one wrote.
func TestLimitsProblems(t *testing.T) {
	t.Parallel()
	_, err := guard.New(guard.Limits(
		guard.Limit{Name: "ok", Rate: 5},
		guard.Limit{Name: "bad", Rate: -1, Paths: []string{"students"}},
		guard.Limit{Name: "ok", Rate: 5},
	), guard.Options{})
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v, want config.Errors", err)
	}
	for _, want := range []string{"guard.Limits: limits[1].rate: ", "guard.Limits: limits[1].match.paths[0]: ", "guard.Limits: limits[2].name: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems:\n%v\nwant one starting %q", err, want)
		}
	}
	if _, err := guard.New(guard.Limits(), guard.Options{}); err == nil {
		t.Error("no limits: no error")
	}
	if _, err := guard.New(guard.Source{}, guard.Options{}); err == nil || !strings.Contains(err.Error(), "File or Limits") {
		t.Errorf("no source: %v", err)
	}
	if _, err := guard.New(guard.Limits(guard.Limit{Name: "x", Algorithm: 99, Rate: 1}), guard.Options{}); err == nil {
		t.Error("algorithm 99: no error")
	}
}

// TestFileFollowsItsChanges: a new valid version of the policy file is
// applied to the requests that follow; an invalid one is logged and not
// applied, and the running policy stays.
func TestFileFollowsItsChanges(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	policyOf := func(name string) string {
		return "version: 1\nlimits:\n  - {name: " + name + ", rate: 100, per: 1h}\n"
	}
	writeFile(t, file, policyOf("before"))
	logs := &syncBuffer{}
	g := newGuard(t, guard.File(file), guard.Options{ReloadInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	url := serveGuard(t, g)
	c := &http.Client{}
	if got := do(t, c, "GET", url+"/", nil).policy; got != `"before";q=100;w=3600` {
		t.Fatalf("policy %q", got)
	}
	// waitFor waits until ok, looking again after the watcher's next look.
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30s: %s", what)
			}
		}
	}
	policyIs := func(want string) func() bool {
		return func() bool { return do(t, c, "GET", url+"/", nil).policy == want }
	}
	writeFile(t, file, policyOf("after"))
	waitFor("the new version is not applied", policyIs(`"after";q=100;w=3600`))

	writeFile(t, file, "version: 1\nlimits:\n  - {name: broken, rate: -5}\n")
	waitFor("the invalid version is not logged", func() bool { return strings.Contains(logs.String(), "invalid file, keeping the running policy") })
	if got := do(t, c, "GET", url+"/", nil).policy; got != `"after";q=100;w=3600` {
		t.Fatalf("after an invalid version: policy %q, want the running one", got)
	}
	writeFile(t, file, policyOf("again"))
	waitFor("the version after an invalid one is not applied", policyIs(`"again";q=100;w=3600`))
}

// syncBuffer is a buffer safe for a logger used from goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStateFileKeepsCountsAcrossClose: on the memory store, a policy
// file's state_file keeps the counts when the Guard is closed and a new
// one starts: a used-up quota stays used up.
func TestStateFileKeepsCountsAcrossClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	writeFile(t, file, "version: 1\nserver: {state_file: counts.state}\nlimits:\n  - {name: daily, period: day, limit: 2}\n")
	c := &http.Client{}
	start := func() (*guard.Guard, string) {
		g, err := guard.New(guard.File(file), guard.Options{ReloadInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Middleware(service))
		t.Cleanup(srv.Close)
		return g, srv.URL
	}
	g, url := start()
	for i, want := range []int{200, 200, 429} {
		if got := do(t, c, "GET", url+"/", nil).status; got != want {
			t.Fatalf("request %d: %d, want %d", i+1, got, want)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "counts.state")); err != nil {
		t.Fatalf("no state file beside the policy: %v", err)
	}
	g, url = start()
	defer g.Close()
	if got := do(t, c, "GET", url+"/", nil); got.status != 429 || got.body != `{"message":"Limit Exceeded"}` {
		t.Fatalf("after a restart: %v, want the quota still used up", got)
	}
}

// TestStores: a policy that names Redis needs an opener; a store given in
// the options is used, and left open by Close; StoreURL replaces the
// file's store.
func TestStores(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, "version: 1\nserver: {store: \"redis://user:secret@127.0.0.1:1/0\"}\nlimits:\n  - {name: one, rate: 1, per: 1h}\n")
	_, err := guard.New(guard.File(file), guard.Options{})
	if err == nil || !strings.Contains(err.Error(), "OpenStore") || strings.Contains(err.Error(), "secret") {
		t.Errorf("Redis without an opener: %v, want a hint at OpenStore and no password", err)
	}
	opened := ""
	_, err = guard.New(guard.File(file), guard.Options{OpenStore: func(c guard.StoreConfig) (limiter.Store, func() error, error) {
		opened = c.URL
		return nil, nil, errors.New("no Redis here")
	}})
	if err == nil || !strings.Contains(err.Error(), "no Redis here") || opened != "redis://user:secret@127.0.0.1:1/0" {
		t.Errorf("opener: %v, asked for %q", err, opened)
	}

	// StoreURL "memory" counts in memory whatever the file says.
	g := newGuard(t, guard.File(file), guard.Options{StoreURL: "memory", ReloadInterval: -1})
	url := serveGuard(t, g)
	c := &http.Client{}
	if a, b := do(t, c, "GET", url+"/", nil).status, do(t, c, "GET", url+"/", nil).status; a != 200 || b != 429 {
		t.Errorf("in memory: %d then %d, want 200 then 429", a, b)
	}

	// A store of the caller's: counts there, and stays open.
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	g2, err := guard.New(guard.Limits(guard.Limit{Name: "one", Rate: 1, Per: time.Hour}), guard.Options{Store: ms})
	if err != nil {
		t.Fatal(err)
	}
	url2 := serveGuard(t, g2)
	if got := do(t, c, "GET", url2+"/", nil).status; got != 200 {
		t.Fatalf("first request: %d", got)
	}
	if err := g2.Close(); err != nil {
		t.Fatal(err)
	}
	if ms.Stats().Keys != 1 {
		t.Errorf("the caller's store holds %d keys, want the limit's 1", ms.Stats().Keys)
	}
	g3 := newGuard(t, guard.Limits(guard.Limit{Name: "one", Rate: 1, Per: time.Hour}), guard.Options{Store: ms})
	if got := do(t, c, "GET", serveGuard(t, g3)+"/", nil).status; got != 429 {
		t.Errorf("a second Guard on the same store: %d, want 429 (the store was left open, its count kept)", got)
	}
}

// TestNoHTTPEngineButNetHTTP: a program that imports guard compiles no
// other HTTP engine, no Redis client and no gRPC.
func TestNoHTTPEngineButNetHTTP(t *testing.T) {
	t.Parallel()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command to list the dependencies with: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"valyala/fasthttp", "gateway/edge", "redis/rueidis", "store/redisstore", "google.golang.org/grpc", "prometheus"} {
			if strings.Contains(dep, banned) {
				t.Errorf("guard depends on %s", dep)
			}
		}
	}
}

// countingMetrics counts what a Guard tells its Metrics.
type countingMetrics struct {
	decisions, rejected atomic.Int64
	tokens              atomic.Int64
}

func (m *countingMetrics) ObserveDecision(*limiter.Request, *limiter.Result) { m.decisions.Add(1) }
func (m *countingMetrics) Rejected(limiter.FrontEnd, string, int)            { m.rejected.Add(1) }
func (m *countingMetrics) Queued(string, int)                                {}
func (m *countingMetrics) Upstream(string, int)                              {}
func (m *countingMetrics) InvalidToken(string)                               { m.tokens.Add(1) }

// A *metrics.Metrics, as floodgate serve's, is a Guard's Metrics.
var _ guard.Metrics = (*metrics.Metrics)(nil)

// TestMetrics: the Guard tells its Metrics every decision and every
// refusal of its own.
func TestMetrics(t *testing.T) {
	t.Parallel()
	m := &countingMetrics{}
	g := newGuard(t, guard.Limits(guard.Limit{Name: "one", Rate: 1, Per: time.Hour}), guard.Options{Metrics: m})
	url := serveGuard(t, g)
	c := &http.Client{}
	do(t, c, "GET", url+"/", nil)
	do(t, c, "GET", url+"/", nil)
	if d, r := m.decisions.Load(), m.rejected.Load(); d != 2 || r != 1 {
		t.Errorf("%d decisions and %d refusals observed, want 2 and 1", d, r)
	}
}

// TestLoggerHoldsBackAFlood: the logger a Guard gives its engine and
// store holds back past ten lines of one message a second, as serve's
// does: 100 warnings of a store (one a request while Redis is out of
// reach) reach the embedder's log as ten, then the last held back at the
// second's end says how many others were.
func TestLoggerHoldsBackAFlood(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, "version: 1\nserver: {store: \"redis://127.0.0.1:1/0\"}\nlimits:\n  - {name: one, rate: 1, per: 1h}\n")
	var buf syncBuffer
	_, err := guard.New(guard.File(file), guard.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		OpenStore: func(c guard.StoreConfig) (limiter.Store, func() error, error) {
			for range 100 {
				c.Logger.Warn("redisstore: refund failed; the charge stays until its window passes")
			}
			c.Logger.Info("another message")
			return nil, nil, errors.New("no Redis here")
		}})
	if err == nil {
		t.Fatal("the opener's error was not returned")
	}
	count := func() (int, int64) {
		lines, held, err := lograte.Count(buf.String(), "refund failed")
		if err != nil {
			t.Fatal(err)
		}
		return lines, held
	}
	if lines, _ := count(); lines != 10 {
		t.Fatalf("%d lines of 100 in a second, want 10:\n%s", lines, buf.String())
	}
	if !strings.Contains(buf.String(), "another message") {
		t.Errorf("another message was held back:\n%s", buf.String())
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if lines, held := count(); lines == 11 && held == 89 {
			return
		}
	}
	lines, held := count()
	t.Fatalf("%d lines saying %d held back, want 11 accounting for 100:\n%s", lines, held, buf.String())
}
