package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// What a client that leaves early costs, end to end through "floodgate
// serve" with the examples in front of the demo, on both engines and both
// stores: a streamed completion is charged the usage its upstream reports
// (the gateway reads the stream on after the client left), and a failed
// login counts once its 401 is known, whatever the client does next.

// stores are the stores the end-to-end tests of charges run on: "memory",
// or "redis" (a real redis-server started for the test).
var stores = []string{"memory", "redis"}

// forEnginesAndStores runs f on each engine and each store.
func forEnginesAndStores(t *testing.T, f func(t *testing.T, engine, store string)) {
	t.Helper()
	for _, s := range stores {
		t.Run(s, func(t *testing.T) {
			forEngines(t, func(t *testing.T, engine string) { f(t, engine, s) })
		})
	}
}

// exampleOn returns the path of examples/name with its counters in store:
// the file itself for "memory"; for "redis", a copy naming a new
// redis-server's address (with a store deadline that a loaded machine
// keeps), with the files it refers to beside it.
func exampleOn(t *testing.T, name, store string) string {
	t.Helper()
	path := filepath.Join("..", "..", "examples", name)
	if store == "memory" {
		return path
	}
	rs := redistest.Start(t)
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := regexp.MustCompile(`(?m)^  store: .*$`).ReplaceAll(src, []byte("  store: redis://"+rs.Addr+"/0\n  store_timeout: 2s"))
	cfg = regexp.MustCompile(`(?m)^  store_timeout: 250ms.*$`).ReplaceAll(cfg, nil)
	if !bytes.Contains(cfg, []byte("store: redis://")) {
		t.Fatalf("examples/%s has no server.store to replace", name)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if secret, err := os.ReadFile(filepath.Join("..", "..", "examples", "demo-jwt-secret.txt")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "demo-jwt-secret.txt"), secret, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, name)
}

// leaveAfter sends the raw request req to base on a connection of its own,
// reads until it has n bytes of the answer, and leaves: it closes the
// connection, or resets it (reset). It returns what it read.
func leaveAfter(t *testing.T, base, req string, n int, reset bool) []byte {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if reset {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
	}()
	// A small receive buffer: what the client has not read stays with
	// the gateway rather than in a buffer the kernel may grow to
	// megabytes on loopback.
	_ = c.(*net.TCPConn).SetReadBuffer(16 << 10)
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, n)
	buf := make([]byte, n)
	for len(got) < n {
		m, err := c.Read(buf[:n-len(got)])
		got = append(got, buf[:m]...)
		if err != nil {
			t.Fatalf("the answer ended after %d bytes (%v), before the client meant to leave: %q", len(got), err, got)
		}
	}
	return got
}

// sendBufferMax is the largest a TCP socket's send buffer grows on this
// machine (tcp_wmem's third field; 4 MiB, Linux's usual, when it cannot
// be read).
func sendBufferMax(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if f := strings.Fields(string(b)); err == nil && len(f) == 3 {
		if n, err := strconv.Atoi(f[2]); err == nil && n > 0 {
			return n
		}
	}
	t.Logf("tcp_wmem unread (%v): taking 4 MiB", err)
	return 4 << 20
}

// rawPost is a raw HTTP/1.1 POST of body to path with the header lines hdr.
func rawPost(path, body string, hdr ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, len(body))
	for _, h := range hdr {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// dayUsed returns the tokens-per-day quota's units used by key's
// organisation, read by a probe that reserves 1 token (and uses 1: the
// demo's answer to an empty prompt with max_tokens 1); probes counts the
// probes made before, whose tokens it leaves out.
func dayUsed(t *testing.T, gw, key string, probes int) int {
	t.Helper()
	code, hdr, body := post(t, http.DefaultClient, gw+"/v1/chat/completions", `{"model":"demo","max_tokens":1,"messages":[]}`,
		"Authorization", "Bearer "+key)
	if code != 200 {
		t.Fatalf("probe: %d %s", code, body)
	}
	m := regexp.MustCompile(`"tokens-per-day";r=(\d+)`).FindStringSubmatch(hdr.Get("RateLimit"))
	if m == nil {
		t.Fatalf("probe: no tokens-per-day in RateLimit %q", hdr.Get("RateLimit"))
	}
	var r int
	fmt.Sscan(m[1], &r)
	return 2_000_000 - 1 - r - probes
}

// TestLeavingStreamsPayTheirUsage runs examples/llm.yaml in front of the
// demo's model: ten streamed completions, each reserving 9,000 tokens,
// read for 1,500 bytes and left, cost what ten read to the end cost (32
// tokens each, the usage of the stream's last event), not 0.
func TestLeavingStreamsPayTheirUsage(t *testing.T) {
	t.Parallel() // it waits on streams, not on the CPU
	forEnginesAndStores(t, testLeavingStreams)
}

func testLeavingStreams(t *testing.T, engine, store string) {
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", exampleOn(t, "llm.yaml", store), "--demo",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	const each = 32 // the demo's usage for the prompt "hi": 4 + 28
	stream := `{"model":"demo","max_tokens":9000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	// Read to the end, by the organisation acme.
	for range 10 {
		code, _, body := post(t, http.DefaultClient, gw+"/v1/chat/completions", stream, "Authorization", "Bearer key-acme-dev")
		if code != 200 || !strings.Contains(body, fmt.Sprintf(`"total_tokens":%d`, each)) {
			t.Fatalf("stream: %d %q", code, body)
		}
	}
	if used := dayUsed(t, gw, "key-acme-dev", 0); used != 10*each {
		t.Fatalf("ten streams read to the end cost %d tokens, want %d", used, 10*each)
	}
	// Left after 1,500 bytes, by the organisation globex: the gateway
	// reads each stream on to its usage event (the demo writes one event
	// each 20 ms), so the charges settle a moment after the clients left.
	for i := range 10 {
		got := leaveAfter(t, gw, rawPost("/v1/chat/completions", stream, "Authorization: Bearer key-globex"), 1500, i%2 == 1)
		if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
			t.Fatalf("stream %d: %q", i, got[:min(len(got), 200)])
		}
	}
	used, probes := 0, 0
	// A probe a second, at most 30: with the 10 streams, within the
	// key's 60 requests a minute.
	for deadline := time.Now().Add(30 * time.Second); ; probes++ {
		used = dayUsed(t, gw, "key-globex", probes)
		if used == 10*each || time.Now().After(deadline) { // reservations still in flight count 9,000
			break
		}
		time.Sleep(time.Second)
	}
	if used != 10*each {
		t.Fatalf("ten streams left after 1,500 bytes cost %d tokens, want %d as read to the end", used, 10*each)
	}
}

// TestLeavingLoginsCount sends 12 wrong passwords through a login limit
// of 5 failed logins a minute (counted by outcome, as the school example's)
// to a login upstream that sends its 401's status line and then a body
// that takes its time; each client reads the status line and leaves
// (closing or resetting its connection) while the body is still coming.
// Each attempt counts, so 5 reach the upstream and 7 are answered 429.
func TestLeavingLoginsCount(t *testing.T) { forEnginesAndStores(t, testLeavingLogins) }

func testLeavingLogins(t *testing.T, engine, store string) {
	var reached atomic.Int64
	body := strings.Repeat("x", 4<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for range 64 {
			time.Sleep(2 * time.Millisecond)
			if _, err := io.WriteString(w, body); err != nil || rc.Flush() != nil {
				return
			}
		}
	}))
	defer up.Close()
	where := "memory"
	if store == "redis" {
		where = "redis://" + redistest.Start(t).Addr + "/0"
	}
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  store: %s
  store_timeout: 2s
routes:
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: %q}
limits:
  - {name: login, algorithm: sliding_log, limit: 5, window: 1m, key: client_ip, count_on: [401, 403], on_failure: deny}
`, where, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	codes := map[string]int{}
	for i := range 12 {
		got := leaveAfter(t, gw, rawPost("/login", fmt.Sprintf(`{"user":"ana","password":"guess-%d"}`, i)), len("HTTP/1.1 401"), i%2 == 1)
		codes[string(got[len("HTTP/1.1 "):])]++
	}
	if codes["401"] != 5 || codes["429"] != 7 || reached.Load() != 5 {
		t.Fatalf("12 failed logins whose clients left after the status line: %v, %d reached the upstream; want 5 × 401 (the limit) and 7 × 429", codes, reached.Load())
	}
}

// TestLeavingLoginsOffend: floodgate serve with a penalty-box rule of
// failed logins (count_on: [401], three within ten minutes), against a
// guesser that hangs up once each attempt has reached the upstream, before
// the upstream's 401 comes (closing, then resetting). Each 401 is an
// offence, the address is banned at the third, and the fourth is answered
// 429 with Retry-After before it reaches the upstream. Before, on the
// net/http engine, such a guesser was never banned.
func TestLeavingLoginsOffend(t *testing.T) { forEngines(t, testLeavingLoginsOffend) }

func testLeavingLoginsOffend(t *testing.T, engine string) {
	var reached atomic.Int64
	gate := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reached.Add(1) <= 3 {
			select {
			case <-gate: // the guesser has hung up
			case <-time.After(30 * time.Second):
			}
			select {
			case <-r.Context().Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  admin:
    tokens: [{name: ops, sha256: %q}]
  bans:
    - {name: logins, key: client_ip, after: 3, within: 10m, ban: 15m, count_on: [401]}
routes:
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: %q}
`, sha256Hex("ops-token"), up.URL))
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	u, _ := url.Parse(gw)
	for i := range 3 {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, rawPost("/login", fmt.Sprintf(`{"user":"ana","password":"guess-%d"}`, i))); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); reached.Load() <= int64(i); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("login %d never reached the upstream", i)
			}
		}
		if i%2 == 1 {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
		gate <- struct{}{}
	}
	waitUntil(t, "the guesser's ban", 5*time.Second, func() bool {
		var list struct{ Total int }
		return call(t, "GET", admin+"/api/v1/bans", "ops-token", nil, &list) == 200 && list.Total == 1
	})
	st, h, _ := post(t, http.DefaultClient, gw+"/login", `{"user":"ana","password":"guess-3"}`)
	if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" || reached.Load() != 3 {
		t.Fatalf("after three failed logins whose clients hung up before the 401: %d, Retry-After %q, %d reached the upstream; want 429 with Retry-After (banned) and 3",
			st, h.Get("Retry-After"), reached.Load())
	}
}

// TestLeavingDrainBoundFromFile holds serve to server.upstream.drain_bytes:
// a stream whose client left is read on only that far, and then keeps its
// estimate.
func TestLeavingDrainBoundFromFile(t *testing.T) { forEngines(t, testLeavingDrainBound) }

func testLeavingDrainBound(t *testing.T, engine string) {
	wrote := make(chan error, 1)
	// The stream is longer than what the gateway's socket to the client
	// may hold (its send buffer grows up to tcp_wmem's largest size), so
	// that the usage at its end comes only well past the drain bound.
	events := 2 * sendBufferMax(t) / 1000
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		event := "data: " + strings.Repeat("w", 1000) + "\n\n"
		var err error
		for i := 0; i < events && err == nil; i++ {
			if _, err = io.WriteString(w, event); err == nil {
				err = rc.Flush()
			}
		}
		if err == nil {
			_, err = io.WriteString(w, "data: {\"usage\":{\"total_tokens\":10}}\n\n")
		}
		wrote <- err
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  upstream: {drain_bytes: 65536}
  access_log: {path: "-"}
routes:
  - {name: chat, match: {paths: ["/v1/chat/completions"]}, upstream: %q}
limits:
  - {name: tokens, algorithm: fixed_window, limit: 100000, window: 1h, key: global, estimate: {body: max_tokens}, actual: {body: usage.total_tokens}}
`, up.URL))
	gw, _, _, out := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	leaveAfter(t, gw, rawPost("/v1/chat/completions", `{"max_tokens":5000}`), 2000, false)
	<-wrote // past the bound the write fails, or fills the connection's buffers
	// The access log's record comes once the reservation is settled.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "/v1/chat/completions"); {
		if time.Now().After(deadline) {
			t.Fatalf("the left stream never ended:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, hdr, _ := post(t, http.DefaultClient, gw+"/v1/chat/completions", `{"max_tokens":1}`)
	if rl := hdr.Get("RateLimit"); !strings.Contains(rl, `"tokens";r=94999;`) {
		t.Fatalf("RateLimit %q: want the left stream's estimate, 5,000, kept and 1 reserved", rl)
	}
}
