package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCheckAPIConnectionFlood: the check API's listener serves a bounded
// number of connections (a quarter of the open-file limit, at least 64)
// and answers one past it 503 at once, so that a flood of connections to
// it, each sending its headers a byte at a time, cannot run the process
// out of file descriptors: the gateway and the admin listener keep
// answering, and so does the check API once the flood leaves. Before the
// bound, 400 such connections to a process with 256 open files took every
// descriptor (accept: too many open files; the policy file could not be
// read again) until the header timeout cut them, and a flood that dials
// again as it is cut holds them for as long as it lasts.
func TestCheckAPIConnectionFlood(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  api_listen: 127.0.0.1:0
  api_auth: none
limits:
  - name: login
    algorithm: fixed_window
    limit: 1000
    window: 1m
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	// 256 open files, soft and hard, for the serve process alone.
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, bin, "serve", "--config", cfg,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--log-level", "warn")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	p := startProcCmd(t, cmd)
	m := regexp.MustCompile(`check API on http://(\S+)`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no check API address in:\n%s", p.out.String())
	}
	api := m[1]
	check := func() (int, error) {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Post("http://"+api+"/v1/check", "application/json", strings.NewReader(`{"limit":"login","key":"k"}`))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := check(); err != nil || code != 200 {
		t.Fatalf("a check before the flood: %d %v", code, err)
	}

	const flood = 400
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.DialTimeout("tcp", api, 5*time.Second)
		if err != nil {
			break // the listen queue is full: the flood is as large as it gets
		}
		conns = append(conns, c)
		// The start of a request, whose headers never end.
		_, _ = c.Write([]byte("POST /v1/check HTTP/1.1\r\nHost: x\r\n"))
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, url := range []string{p.admin + "/healthz", p.gw + "/x"} {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("%s during a flood of %d connections to the check API: %v", url, len(conns), err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s during the flood: %d, want 200", url, resp.StatusCode)
		}
	}
	if out := p.out.String(); strings.Contains(out, "too many open files") {
		t.Fatalf("a flood of %d connections to the check API ran the process out of file descriptors:\n%s", len(conns), linesWith(out, "too many open files", 3))
	}
	// The last connection of the flood is past the bound: 503 at once.
	last := conns[len(conns)-1]
	_ = last.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(last), nil)
	if err != nil {
		t.Fatalf("a connection past the check API's bound: %v; want 503 at once", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a connection past the check API's bound: %d, want 503", resp.StatusCode)
	}

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	var code int
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, err = check()
		if err == nil && code == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || code != 200 {
		t.Errorf("a check after the flood left: %d %v", code, err)
	}
}

// linesWith returns the first n lines of out that contain s.
func linesWith(out, s string, n int) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if n > 0 && strings.Contains(l, s) {
			b.WriteString(l + "\n")
			n--
		}
	}
	return b.String()
}

// TestCheckAPIShedConnectionsCounted: a connection past the check API's
// bound, answered 503 and closed, is counted in
// floodgate_connections_shed_total{listener="api"}, as one past the
// gateway's server.max_connections is in {listener="gateway"}: the alert
// and the dashboard that watch the counter see a flood of either. Before,
// the check API's shed connections were counted nowhere.
func TestCheckAPIShedConnectionsCounted(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  api_listen: 127.0.0.1:0
  api_auth: none
limits:
  - name: login
    algorithm: fixed_window
    limit: 1000
    window: 1m
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	// 256 open files: the check API serves at most 64 connections. No
	// ops listener: its default port may be taken on the machine.
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, bin, "serve", "--config", cfg,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "off", "--log-level", "warn")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	p := startProcCmd(t, cmd)
	m := regexp.MustCompile(`check API on http://(\S+)`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no check API address in:\n%s", p.out.String())
	}
	api := m[1]
	const apiCap, past = 64, 5
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// The bound's connections, each a request whose headers never end.
	for range apiCap {
		c, err := net.DialTimeout("tcp", api, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		_, _ = c.Write([]byte("POST /v1/check HTTP/1.1\r\nHost: x\r\n"))
	}
	for i := range past {
		c, err := net.DialTimeout("tcp", api, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d past the check API's bound: %v; want 503 at once", apiCap+i+1, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("connection %d past the check API's bound: %d, want 503", apiCap+i+1, resp.StatusCode)
		}
	}
	_, _, text := get(t, p.admin+"/metrics")
	if want := fmt.Sprintf("floodgate_connections_shed_total{listener=\"api\"} %d\n", past); !strings.Contains(text, want) {
		t.Errorf("%d connections shed by the check API; want %q in /metrics:\n%s", past, strings.TrimSpace(want), grepLines(text, "floodgate_connections_"))
	}
	if want := "floodgate_connections_shed_total{listener=\"gateway\"} 0\n"; !strings.Contains(text, want) {
		t.Errorf("no connection shed by the gateway; want %q in /metrics:\n%s", strings.TrimSpace(want), grepLines(text, "floodgate_connections_"))
	}
}
