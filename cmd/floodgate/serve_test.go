package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// startServe runs "floodgate serve" with args until the returned stop is
// called; it returns the gateway's and the admin listener's base URLs, read
// from what serve prints.
func startServe(t *testing.T, args ...string) (gw, admin string, stop func() error, out *lockedBuffer) {
	t.Helper()
	gw, admin, stop, out, _ = startServeLogged(t, args...)
	return gw, admin, stop, out
}

// startServeLogged is startServe also returning what serve logs.
func startServeLogged(t *testing.T, args ...string) (gw, admin string, stop func() error, out, logs *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	out = &lockedBuffer{}
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"serve"}, withOps(args)...), pw, stderr)
		pw.Close()
		done <- err
	}()
	gwRe := regexp.MustCompile(`gateway on (https?://\S+)`)
	adRe := regexp.MustCompile(`admin on (http://\S+)`)
	sc := bufio.NewScanner(pr)
	found := make(chan struct{})
	// copied closes once every line serve wrote is in out: serve's end
	// (done) comes before the last lines are copied.
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		for sc.Scan() {
			line := sc.Text()
			out.Write([]byte(line + "\n"))
			if m := gwRe.FindStringSubmatch(line); m != nil {
				gw = m[1]
			}
			if m := adRe.FindStringSubmatch(line); m != nil {
				admin = m[1]
				close(found)
			}
		}
		_, _ = io.Copy(io.Discard, pr) // past a line too long to scan
	}()
	select {
	case <-found:
	case err := <-done:
		cancel()
		t.Fatalf("serve ended early: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
				<-copied
			case <-time.After(60 * time.Second):
				stopErr = fmt.Errorf("serve did not stop")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return gw, admin, stop, out, stderr
}

// withOps puts the ops listener of a serve on a free port unless args
// name its address: its default port would be shared by the tests that
// run at once.
func withOps(args []string) []string {
	for _, a := range args {
		if a == "--ops-listen" || strings.HasPrefix(a, "--ops-listen=") {
			return args
		}
	}
	return append([]string{"--ops-listen", "127.0.0.1:0"}, args...)
}

// opsURL returns the ops listener's base URL from what serve printed.
func opsURL(t testing.TB, out string) string {
	t.Helper()
	m := regexp.MustCompile(`ops on (http://\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("serve named no ops listener:\n%s", out)
	}
	return m[1]
}

// writeConfig writes a policy file, gw.yaml, into a new temporary
// directory and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func get(t *testing.T, url string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" { // net/http sends req.Host, not a Host field
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestServeDemo runs the README's first command (on free ports): the
// school example in front of the demo upstream.
func TestServeDemo(t *testing.T) { forEngines(t, testServeDemo) }

func testServeDemo(t *testing.T, engine string) {
	gw, admin, stop, out := startServe(t, "--engine", engine, "--config", "../../examples/school.yaml", "--demo",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	if !strings.Contains(out.String(), "demo upstream") {
		t.Errorf("no demo banner in %q", out.String())
	}
	if code, _, _ := get(t, admin+"/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, _, _ := get(t, admin+"/readyz"); code != 200 {
		t.Errorf("/readyz %d", code)
	}
	// Stage dev: the first five of a burst pass, and a burst of 20 meets
	// 429s; a slow machine may refill a token every 200 ms on the way.
	start := time.Now()
	var codes []int
	for i := 0; i < 20; i++ {
		code, h, body := get(t, gw+"/students/9")
		codes = append(codes, code)
		if code == 200 && !strings.Contains(body, `"id":9`) {
			t.Errorf("demo body %q", body)
		}
		if code == 429 && (h.Get("Retry-After") == "" || !strings.HasPrefix(h.Get("RateLimit"), `"stage.dev";r=0`)) {
			t.Errorf("429 fields: %v", h)
		}
	}
	passed := 0
	for _, c := range codes {
		if c == 200 {
			passed++
		}
	}
	if refill := int(time.Since(start)/(200*time.Millisecond)) + 1; passed < 5 || passed > 5+refill || codes[0] != 200 {
		t.Errorf("stage dev burst: %v", codes)
	}
	// The trial plan: 3 a day, then Limit Exceeded.
	var trial []int
	var last string
	for i := 0; i < 4; i++ {
		code, _, body := get(t, gw+"/partner/students/9", "x-api-key", "key-trial")
		trial = append(trial, code)
		last = body
	}
	if fmt.Sprint(trial) != "[200 200 200 429]" || !strings.Contains(last, "Limit Exceeded") {
		t.Errorf("trial: %v %q", trial, last)
	}
	if code, _, body := get(t, gw+"/partner/students/9", "x-api-key", "key-nobody"); code != 403 || !strings.Contains(body, "Forbidden") {
		t.Errorf("unknown key: %d %q", code, body)
	}
	code, _, metrics := get(t, admin+"/metrics")
	for _, want := range []string{
		`floodgate_rejections_total{code="429",front_end="gateway",limit="stage.dev"}`,
		`floodgate_rejections_total{code="429",front_end="gateway",limit="trial.quota"} 1`,
		`floodgate_rejections_total{code="403",front_end="gateway",limit=""} 1`,
		`floodgate_decisions_total{front_end="gateway",limit="stage.dev",outcome="allowed"}`,
		`floodgate_upstream_responses_total{code="200",route="students"}`,
		`floodgate_store_latency_seconds_count`,
		`go_goroutines`,
	} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics %d has no %s", code, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// TestServeGracefulShutdown stops serve while a request is in flight: the
// request finishes, /readyz turns 503 meanwhile, serve returns without
// error and the memory store writes its state file.
func TestServeGracefulShutdown(t *testing.T) { forEngines(t, testServeGracefulShutdown) }

func testServeGracefulShutdown(t *testing.T, engine string) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "finished")
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:0"
  state_file: state.bin
routes:
  - name: slow
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: per-ip
    rate: 100
    burst: 100
    key: client_ip
`, up.URL)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	gw, admin, stop, out := startServe(t, "--engine", engine, "--config", cfg, "--log-level", "error")
	ops := opsURL(t, out.String())
	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get(gw + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// While the request is in flight, serve is draining: not ready.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 503 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz never turned 503 during the shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, _, body := get(t, ops+"/readyz"); code != 503 {
		t.Errorf("the ops listener's /readyz during the shutdown: %d %q, want 503", code, body)
	}
	close(release)
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "finished" {
		t.Fatalf("in-flight request: %d %q %v", r.code, r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "state.bin")); err != nil || fi.Size() == 0 {
		t.Errorf("state file: %v", err)
	}
}

func TestServeBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve"},
		{"serve", "--config"},
		{"serve", "--config", "x.yaml", "extra"},
		{"serve", "--config", "x.yaml", "--log-format", "xml"},
		{"serve", "--config", "x.yaml", "--shutdown-timeout", "0s"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
	err := run(context.Background(), []string{"serve", "--config", "/nonexistent/floodgate.yaml"}, io.Discard, io.Discard)
	if err == nil || exitCode(err) != 1 {
		t.Errorf("missing file: %v", err)
	}
}

// TestServeReloadOnSIGHUP raises a limit in the file and sends SIGHUP: the
// running gateway takes the new limit without a restart.
func TestServeReloadOnSIGHUP(t *testing.T) { forEngines(t, testServeReloadOnSIGHUP) }

func testServeReloadOnSIGHUP(t *testing.T, engine string) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	write := func(burst int) { t.Helper(); writeHourly(t, cfg, up.URL, burst) }
	write(2)
	// Without --watch=false the changed file would be applied anyway.
	gw, _, stop, _ := startServe(t, "--engine", engine, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	var codes []int
	for i := 0; i < 3; i++ {
		code, _, _ := get(t, gw+"/")
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("before the reload: %v", codes)
	}
	write(10)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	awaitPolicy(t, gw, `"hourly";q=10`, 20*time.Second, "the reload")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// writeHourly writes to path a policy of one route to upstream and one
// global limit of 1 an hour with the burst given.
func writeHourly(t *testing.T, path, upstream string, burst int) {
	t.Helper()
	err := os.WriteFile(path, []byte(fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: hourly
    rate: 1
    per: 1h
    burst: %d
    key: global
`, upstream, burst)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
}

// awaitPolicy asks the gateway gw until its RateLimit-Policy names want,
// which must come with a 200, for at most d; what names the change
// awaited, for a failure.
func awaitPolicy(t *testing.T, gw, want string, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, h, _ := get(t, gw+"/")
		if strings.Contains(h.Get("RateLimit-Policy"), want) {
			if code != 200 {
				t.Fatalf("%s: %d with %s", what, code, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never took effect: last answer %d, RateLimit-Policy %q", what, code, h.Get("RateLimit-Policy"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeKeepsAnEarlySIGHUP: a SIGHUP that comes while serve is still
// starting is not lost (nor, as an unhandled SIGHUP would, does it end
// the process): the reload runs once serve serves. The test holds serve
// while it writes where it listens (its standard output unread), changes
// the file, sends SIGHUP, then lets serve go on; the new burst applies.
func TestServeKeepsAnEarlySIGHUP(t *testing.T) {
	// This process lives through the SIGHUP whatever serve does with it.
	delivered := make(chan os.Signal, 1)
	signal.Notify(delivered, syscall.SIGHUP)
	defer signal.Stop(delivered)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	writeHourly(t, cfg, up.URL, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"serve", "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0",
			"--admin-listen", "off", "--ops-listen", "off", "--log-level", "error"}, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	// One byte of serve's first line: serve is writing it, and waits.
	first := make([]byte, 1)
	if _, err := io.ReadFull(pr, first); err != nil {
		t.Fatal(err)
	}
	writeHourly(t, cfg, up.URL, 10)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("the SIGHUP was not delivered")
	}
	gwc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(io.MultiReader(bytes.NewReader(first), pr))
		for sc.Scan() {
			if m := regexp.MustCompile(`gateway on (https?://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				gwc <- m[1]
			}
		}
	}()
	var gw string
	select {
	case gw = <-gwc:
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not say where it listens")
	}
	// The reload runs once serve's loop starts, which on a loaded machine
	// may come after the first requests: until then they get the old
	// burst of 2 (and a 429 past it).
	awaitPolicy(t, gw, `"hourly";q=10`, 20*time.Second, "the reload of the SIGHUP sent while serve started")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeTwoInstancesOneRedis starts two "floodgate serve" on one real
// redis-server: clients spread over both get exactly the limit through.
func TestServeTwoInstancesOneRedis(t *testing.T) { forEngines(t, testServeTwoInstancesOneRedis) }

func testServeTwoInstancesOneRedis(t *testing.T, engine string) {
	rs := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  store: redis://%s/0
  store_timeout: 2s
  instances: 2
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: hourly
    rate: 1
    per: 1h
    burst: 25
    key: global
    on_failure: deny
`, rs.Addr, up.URL))
	var gws []string
	for i := 0; i < 2; i++ {
		gw, _, _, out := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
		if !strings.Contains(out.String(), "store redis") {
			t.Errorf("serve output %q", out.String())
		}
		gws = append(gws, gw)
	}
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				resp, err := http.Get(gws[(c+i)%2] + "/")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				counts[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if counts[200] != 25 || counts[429] != 55 {
		t.Errorf("statuses %v, want 25 × 200 and 55 × 429", counts)
	}
}

// engines are the gateway listener's engines; every end-to-end test of
// the gateway runs on each.
var engines = []string{"fast", "net/http"}

// forEngines runs f as a subtest on each engine, one after the other.
func forEngines(t *testing.T, f func(t *testing.T, engine string)) {
	t.Helper()
	for _, e := range engines {
		t.Run(e, func(t *testing.T) { f(t, e) })
	}
}

// TestServeStoreFile starts "floodgate serve" on a policy file without a
// store and --store-file naming a file that holds a real redis-server's
// URL: the gateway counts in that Redis. An empty or missing file stops
// the start.
func TestServeStoreFile(t *testing.T) {
	rs := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: hourly
    rate: 1
    per: 1h
    burst: 3
    key: global
    on_failure: deny
`, up.URL))
	dir := t.TempDir()
	storeFile := filepath.Join(dir, "store-url")
	if err := os.WriteFile(storeFile, []byte("redis://"+rs.Addr+"/0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, _, stop, out := startServe(t, "--config", cfg, "--store-file", storeFile, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	if !strings.Contains(out.String(), "store redis") {
		t.Errorf("serve output %q, want the Redis store", out.String())
	}
	var codes []int
	for range 4 {
		code, _, _ := get(t, gw+"/")
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[200 200 200 429]" {
		t.Errorf("statuses %v, want three passes and a 429", codes)
	}
	if n, err := rs.Do("DBSIZE"); err != nil || strings.TrimSpace(n) == "0" {
		t.Errorf("DBSIZE %q (%v): the gateway did not count in the store file's Redis", n, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{empty, filepath.Join(dir, "missing")} {
		err := run(context.Background(), []string{"serve", "--config", cfg, "--store-file", f, "--listen", "127.0.0.1:0", "--admin-listen", "off"}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--store-file") {
			t.Errorf("store file %s: %v, want an error naming --store-file", f, err)
		}
	}
}
