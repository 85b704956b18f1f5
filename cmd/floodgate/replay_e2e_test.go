package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/replay"
)

// replayPolicy has a limit of every algorithm that counts time, small
// enough for a few seconds of traffic to meet them all.
const replayPolicy = `version: 1
server:
  trusted_proxies: [127.0.0.1/32]
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: UPSTREAM, stage: prod}
  - {name: search, match: {paths: ["/search"]}, upstream: UPSTREAM, stage: prod}
  - {name: partner, match: {paths: ["/partner/**"]}, upstream: UPSTREAM, api_key_required: true}
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: UPSTREAM}
stages:
  - {name: prod, rate: 300, burst: 60}
plans:
  - {name: basic, rate: 10, burst: 5, quota: {limit: 120, period: DAY}, routes: [partner]}
  - {name: gold, rate: 40, burst: 20, routes: [partner]}
keys:
  - {name: k1, plan: basic, sha256: K1}
  - {name: k2, plan: basic, sha256: K2}
  - {name: k3, plan: gold, sha256: K3}
limits:
  - {name: login, algorithm: sliding_log, limit: 3, window: 1s, match: {methods: [POST], paths: ["/login"]}, key: client_ip, count_on: [401], scope: method}
  - {name: search-window, algorithm: fixed_window, limit: 8, window: 500ms, match: {paths: ["/search"]}, key: client_ip}
  - {name: api-sliding, algorithm: sliding_window, limit: 25, window: 1s, match: {paths: ["/api/**"]}, key: client_ip}
  - {name: lane, algorithm: leaky_queue, rate: 15, burst: 4, delay: nodelay, match: {paths: ["/api/lane/**"]}, key: client_ip}
  - {name: key-gcra, algorithm: gcra, rate: 25, burst: 8, match: {routes: [partner]}, key: api_key}
  - {name: per-ip, rate: 40, burst: 15, key: client_ip, scope: global}
  - {name: per-ip-trial, rate: 5, burst: 5, key: client_ip, shadow: true, scope: global}
account: {rate: 5000, burst: 2000}
`

// replayUpstream answers every request, 401 to a login that asks for it.
func replayUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" && r.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"message":"wrong password"}`)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	return up
}

// writeReplayPolicy writes the test policy with its upstream and keys.
func writeReplayPolicy(t *testing.T, dir, upstream string) string {
	t.Helper()
	s := strings.ReplaceAll(replayPolicy, "UPSTREAM", upstream)
	for _, k := range []string{"K1", "K2", "K3"} {
		s = strings.Replace(s, "sha256: "+k, "sha256: "+config.HashKey("raw-"+strings.ToLower(k)), 1)
	}
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// trafficClient is one client of the generator: an address, maybe an API
// key, and what it asks for.
type trafficClient struct {
	ip, key string
	paths   []string
	method  string
	fail    bool // a login that fails
	// burst and pause shape its traffic: bursts of burst[0] to burst[1]
	// requests, back to back, then a pause of up to pause (defaults 3-16
	// and 250ms).
	burst [2]int
	pause time.Duration
}

// generate sends bursts from every client at once, each on its own
// keep-alive connection, for about d and at least minSent requests (a
// slow machine sends for longer, up to a minute); it returns the number
// of requests sent and the statuses seen.
func generate(t *testing.T, base string, clients []trafficClient, d time.Duration, minSent int64) (int64, map[int]int64) {
	t.Helper()
	var sent atomic.Int64
	var mu sync.Mutex
	codes := map[int]int64{}
	var wg sync.WaitGroup
	start := time.Now()
	more := func() bool {
		el := time.Since(start)
		return el < d || sent.Load() < minSent && el < time.Minute
	}
	for ci, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			lo, hi, pause := c.burst[0], c.burst[1], c.pause
			if hi == 0 {
				lo, hi = 3, 16
			}
			if pause == 0 {
				pause = 250 * time.Millisecond
			}
			for more() {
				burst := lo + rng.IntN(hi-lo+1)
				for range burst {
					req, _ := http.NewRequest(c.method, base+c.paths[rng.IntN(len(c.paths))], nil)
					req.Header.Set("X-Forwarded-For", c.ip)
					if c.key != "" {
						req.Header.Set("X-Api-Key", c.key)
					}
					if c.fail {
						req.Header.Set("X-Fail", "1")
					}
					resp, err := hc.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent.Add(1)
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				}
				// A pause between bursts: traffic, not an assertion.
				time.Sleep(time.Duration(rng.Int64N(int64(pause))))
			}
		}()
	}
	wg.Wait()
	return sent.Load(), codes
}

// replayClients are the generator's clients: several addresses, alone or
// sharing an API key, on every limited route.
func replayClients() []trafficClient {
	var cs []trafficClient
	for i := 1; i <= 6; i++ {
		cs = append(cs, trafficClient{ip: fmt.Sprintf("203.0.113.%d", i), method: "GET",
			paths: []string{"/api/items/1", "/api/items/2", "/search", "/api/lane/x"}})
	}
	cs = append(cs,
		trafficClient{ip: "198.51.100.1", key: "raw-k1", method: "GET", paths: []string{"/partner/a"}},
		trafficClient{ip: "198.51.100.2", key: "raw-k1", method: "GET", paths: []string{"/partner/b"}},
		trafficClient{ip: "198.51.100.3", key: "raw-k2", method: "GET", paths: []string{"/partner/a"}},
		trafficClient{ip: "198.51.100.4", key: "raw-k3", method: "GET", paths: []string{"/partner/a"}},
		trafficClient{ip: "198.51.100.5", key: "raw-k3", method: "GET", paths: []string{"/partner/a", "/partner/c"}},
		trafficClient{ip: "198.51.100.6", key: "guessed", method: "GET", paths: []string{"/partner/a"}},
		trafficClient{ip: "192.0.2.1", method: "POST", paths: []string{"/login"}, fail: true},
		trafficClient{ip: "192.0.2.2", method: "POST", paths: []string{"/login"}},
		trafficClient{ip: "2001:db8:1:2::7", method: "GET", paths: []string{"/search", "/api/items/3"}},
	)
	return cs
}

// runReplayJSON runs floodgate replay with args and decodes its JSON
// report.
func runReplayJSON(t *testing.T, args ...string) (*replay.Report, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append([]string{"replay", "--json", "--quiet"}, args...), &out, &errb)
	if out.Len() == 0 {
		return nil, fmt.Errorf("no report (%v): %s", err, errb.String())
	}
	var r replay.Report
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
		t.Fatalf("report: %v\n%s", jerr, out.String())
	}
	return &r, err
}

// logLine returns line n (from 1) of a file, decoded as JSON.
func logLine(t *testing.T, path string, n int64) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for i := int64(1); sc.Scan(); i++ {
		if i == n {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("%s has no line %d", path, n)
	return nil
}

// checkPrediction holds a replay to the acceptance bar: at least 99.9% of
// the logged decisions predicted, and every difference explained by the
// timestamps' resolution: the refusing side would have let the request
// through within the tolerance (its retry-after says so), or the
// difference pairs with another on the same counter, decided in the
// other order within the tolerance.
func checkPrediction(t *testing.T, r *replay.Report, sent int64, logPath string) {
	t.Helper()
	checkRate(t, r, sent)
	a := r.Agreement
	if a.Unexplained != 0 || a.Boundary+a.Reordered != a.Compared-a.Matched {
		t.Errorf("unexplained differences: %+v", a)
	}
	tol := time.Duration(a.Tolerance)
	for _, m := range a.Mismatches {
		t.Logf("mismatch: %+v", m)
		if m.Class != "boundary" {
			continue
		}
		// The refusing side would have allowed the request a moment
		// later: the live gateway's own retry-after (in the log), or the
		// replay's decision a tolerance later.
		if m.Logged == "deny" && logPath != "" {
			line := logLine(t, logPath, m.Line)
			ra, _ := line["retry_after_us"].(float64)
			if time.Duration(ra)*time.Microsecond > tol {
				t.Errorf("line %d: live refusal with retry-after %vµs, more than the tolerance %v: %v", m.Line, ra, tol, line)
			}
		}
		if m.Replay == "deny" && m.Before == "deny" && m.After == "deny" {
			t.Errorf("a boundary difference the replay refuses both earlier and later: %+v", m)
		}
	}
}

// checkRate: every request sent was replayed and compared, and at least
// 99.9% were decided as live.
func checkRate(t *testing.T, r *replay.Report, sent int64) {
	t.Helper()
	a := r.Agreement
	if a == nil {
		t.Fatal("the report compares nothing with the log")
	}
	t.Logf("%d requests sent, %d replayed, %d compared, %d the same (%.4f%%): %d boundary, %d reordered, %d unexplained",
		sent, r.Requests, a.Compared, a.Matched, 100*a.Rate(), a.Boundary, a.Reordered, a.Unexplained)
	if r.Requests != sent || a.Compared != sent {
		t.Errorf("%d requests sent, %d replayed, %d compared", sent, r.Requests, a.Compared)
	}
	if a.Rate() < 0.999 {
		t.Errorf("the replay predicts %.4f%% of the live decisions, want at least 99.9%%", 100*a.Rate())
	}
}

// TestReplayPredictsServe records traffic through a real floodgate serve
// (bursts from several addresses and API keys, on loopback) and replays
// its access log through the same policy.
func TestReplayPredictsServe(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a few seconds of traffic")
	}
	dir := t.TempDir()
	up := replayUpstream(t)
	cfg := writeReplayPolicy(t, dir, up.URL)
	logPath := filepath.Join(dir, "access.log")
	gw, _, stop, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-level", "error", "--access-log", logPath)
	// Enough requests that a few differences at a boundary, which the
	// timestamps' microseconds leave possible, stay under 0.1%.
	sent, codes := generate(t, gw, replayClients(), 3*time.Second, 6000)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("statuses: %v", codes)
	if codes[429] == 0 || codes[403] == 0 || codes[401] == 0 || codes[200] == 0 {
		t.Fatalf("the traffic misses an answer: %v", codes)
	}
	r, err := runReplayJSON(t, "--config", cfg, "--log", logPath)
	if err != nil {
		t.Fatal(err)
	}
	checkPrediction(t, r, sent, logPath)
	// Every limit that denies live was met by the traffic.
	for _, l := range r.Limits {
		if l.Seen == 0 {
			t.Errorf("limit %s saw no request", l.Name)
		}
	}
	checkCompare(t, cfg, logPath)
}

// checkCompare runs --compare with a policy whose per-address limit is
// halved and holds the flips it lists to two separate replays of the
// same log, request by request; and its exit status to --fail-above.
func checkCompare(t *testing.T, cfg, logPath string) {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(filepath.Dir(cfg), "stricter.yaml")
	strict := strings.Replace(string(b), "{name: per-ip, rate: 40, burst: 15,", "{name: per-ip, rate: 20, burst: 15,", 1)
	if strict == string(b) {
		t.Fatal("the policy has no per-ip limit to change")
	}
	if err := os.WriteFile(other, []byte(strict), 0o644); err != nil {
		t.Fatal(err)
	}
	flipsPath := filepath.Join(filepath.Dir(cfg), "flips.jsonl")
	r, err := runReplayJSON(t, "--config", cfg, "--log", logPath, "--compare", other, "--flips", flipsPath)
	if exitCode(err) != 1 || r.Compare == nil || r.Compare.Flips == 0 {
		t.Fatalf("compare: exit %d (%v), %+v", exitCode(err), err, r.Compare)
	}
	// Two separate replays, request by request, each held to the log's
	// decisions as replay does.
	decide := func(path string) map[int64]bool {
		p, err := loadPolicy(path)
		if err != nil {
			t.Fatal(err)
		}
		rp, err := replay.NewReplayer(p)
		if err != nil {
			t.Fatal(err)
		}
		defer rp.Close()
		denied := map[int64]bool{}
		if err := replay.Records(context.Background(), replay.Options{Logs: []string{logPath}}, func(rec *replay.Record) error {
			denied[rec.Line] = rp.Check(rec, replay.DefaultTolerance).Refused()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return denied
	}
	a, b2 := decide(cfg), decide(other)
	want := map[int64]string{}
	for line, d := range a {
		if d != b2[line] {
			want[line] = map[bool]string{true: "to_allowed", false: "to_denied"}[d]
		}
	}
	got := map[int64]string{}
	f, err := os.Open(flipsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var fl replay.Flip
		if err := json.Unmarshal(sc.Bytes(), &fl); err != nil {
			t.Fatal(err)
		}
		if fl.Limit == "" || fl.Method == "" {
			t.Errorf("flip %+v", fl)
		}
		got[fl.Line] = fl.Direction
	}
	if len(got) != len(want) || int64(len(got)) != r.Compare.Flips {
		t.Fatalf("%d flips listed (%d counted), %d between two separate replays", len(got), r.Compare.Flips, len(want))
	}
	for line, dir := range want {
		if got[line] != dir {
			t.Errorf("line %d: flip %q, want %q", line, got[line], dir)
		}
	}
	t.Logf("%d flips (%d to denied, %d to allowed), the same as two separate replays", r.Compare.Flips, r.Compare.ToDenied, r.Compare.ToAllowed)
	// The threshold: a share above the flips passes, a count below fails.
	share := fmt.Sprintf("%.3f%%", 100*float64(r.Compare.Flips+1)/float64(r.Requests))
	if _, err := runReplayJSON(t, "--config", cfg, "--log", logPath, "--compare", other, "--fail-above", share); err != nil {
		t.Errorf("--fail-above %s: %v", share, err)
	}
	if _, err := runReplayJSON(t, "--config", cfg, "--log", logPath, "--compare", other, "--fail-above", fmt.Sprint(r.Compare.Flips-1)); exitCode(err) != 1 {
		t.Errorf("--fail-above %d: %v", r.Compare.Flips-1, err)
	}
}

// TestReplayRefusedBeforeLimits: requests the gateway refuses with 400
// before any limit (here an API key field sent twice, which the log cannot
// show) charge nothing live; the replay of the gateway's log charges them
// nothing either, so it decides the requests after them as the gateway
// did.
func TestReplayRefusedBeforeLimits(t *testing.T) {
	dir := t.TempDir()
	up := replayUpstream(t)
	cfg := filepath.Join(dir, "policy.yaml")
	pol := fmt.Sprintf(`version: 1
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 3, key: client_ip, scope: global}
`, up.URL)
	if err := os.WriteFile(cfg, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "access.log")
	gw, _, stop, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-level", "error", "--access-log", logPath)
	send := func(twice bool) int {
		req, _ := http.NewRequest("GET", gw+"/api/x", nil)
		if twice {
			req.Header["X-Api-Key"] = []string{"a", "b"}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 3 {
		if code := send(true); code != 400 {
			t.Fatalf("repeated key %d: %d", i, code)
		}
	}
	for i := range 3 {
		if code := send(false); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r, err := runReplayJSON(t, "--config", cfg, "--log", logPath)
	if err != nil {
		t.Fatal(err)
	}
	a := r.Agreement
	if a == nil || a.Matched != a.Compared || a.ReplayDenied != 0 {
		t.Errorf("agreement with the log: %+v", a)
	}
	for _, l := range r.Limits {
		if l.Name == "per-ip" && (l.Seen != 3 || l.Denied != 0) {
			t.Errorf("per-ip: seen %d, denied %d; live it saw the 3 requests that passed and denied none", l.Seen, l.Denied)
		}
	}
}
