package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRLSShedConnectionsCounted: floodgate rls, run with 256 open files,
// serves at most 128 gRPC connections and 64 HTTP ones (/json,
// /healthcheck) at once; a connection past either cap, closed (gRPC) or
// answered 503, is counted in its debug port's /metrics as
// floodgate_connections_shed_total{listener="rls_grpc"} or
// {listener="rls_http"}, so that the alert and the dashboard that watch
// the counter see a flood of Envoy's calls too. Before, the service's
// listeners counted their sheds and exported them nowhere.
func TestRLSShedConnectionsCounted(t *testing.T) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"})
	_, env := envOf(rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "LOG_LEVEL": "warn", "FLOODGATE_HEAP_RESERVE_MIB": "0"}))
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, bin, "rls")
	cmd.Env = append(env, runMainEnv+"=1", "PATH="+os.Getenv("PATH"))
	addrs := startShedProc(t, cmd, `^floodgate rls: (\S+) .* on (\S+)$`, "gRPC", "HTTP", "debug")

	const grpcCap, httpCap, past = 128, 64, 5
	var conns []net.Conn
	defer func() { closeConns(conns) }()
	conns = append(conns, fillCap(t, addrs["gRPC"], grpcCap, "")...)
	for i := range past {
		c := dialShed(t, addrs["gRPC"])
		conns = append(conns, c)
		if b := readAll(t, c); len(b) != 0 {
			t.Fatalf("gRPC connection %d past the cap of %d got %q; want it closed at once", grpcCap+i+1, grpcCap, b)
		}
	}
	conns = append(conns, fillCap(t, addrs["HTTP"], httpCap, "POST /json HTTP/1.1\r\nHost: x\r\n")...)
	for i := range past - 2 {
		c := dialShed(t, addrs["HTTP"])
		conns = append(conns, c)
		if code := statusOf(t, c); code != http.StatusServiceUnavailable {
			t.Fatalf("HTTP connection %d past the cap of %d: %d; want 503 at once", httpCap+i+1, httpCap, code)
		}
	}
	_, _, text := get(t, "http://"+addrs["debug"]+"/metrics")
	for _, want := range []string{
		fmt.Sprintf("floodgate_connections_shed_total{listener=\"rls_grpc\"} %d\n", past),
		fmt.Sprintf("floodgate_connections_shed_total{listener=\"rls_http\"} %d\n", past-2),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("want %q in the debug port's /metrics:\n%s", strings.TrimSpace(want), grepLines(text, "floodgate_connections_"))
		}
	}
}

// TestServeRLSShedConnectionsCounted: floodgate serve with Envoy's
// rate-limit service (grpc_listen), run with 256 open files, serves at
// most 64 of its gRPC connections at once (a quarter, beside the
// gateway); one past that is closed and counted in /metrics as
// floodgate_connections_shed_total{listener="rls_grpc"}, beside the
// gateway's and the check API's counts.
func TestServeRLSShedConnectionsCounted(t *testing.T) {
	up := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(upLn)
	defer up.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  grpc_listen: 127.0.0.1:0
  rls_config: [rls.yaml]
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://%s
limits:
  - name: cap
    algorithm: fixed_window
    limit: 100
    window: 1h
    key: global
`, upLn.Addr())), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, bin, "serve", "--config", cfg,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "off", "--log-level", "warn")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	addrs := startShedProc(t, cmd, `^floodgate: (Envoy|admin)\b.*? on (?:https?://)?(\S+)`, "Envoy", "admin")

	const grpcCap, past = 64, 4
	var conns []net.Conn
	defer func() { closeConns(conns) }()
	conns = append(conns, fillCap(t, addrs["Envoy"], grpcCap, "")...)
	for i := range past {
		c := dialShed(t, addrs["Envoy"])
		conns = append(conns, c)
		if b := readAll(t, c); len(b) != 0 {
			t.Fatalf("gRPC connection %d past the cap of %d got %q; want it closed at once", grpcCap+i+1, grpcCap, b)
		}
	}
	_, _, text := get(t, "http://"+addrs["admin"]+"/metrics")
	for _, want := range []string{
		fmt.Sprintf("floodgate_connections_shed_total{listener=\"rls_grpc\"} %d\n", past),
		"floodgate_connections_shed_total{listener=\"gateway\"} 0\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("want %q in /metrics:\n%s", strings.TrimSpace(want), grepLines(text, "floodgate_connections_"))
		}
	}
	if strings.Contains(text, `floodgate_connections_shed_total{listener="rls_http"}`) {
		t.Errorf("serve has no rate-limit HTTP listener, yet /metrics counts one:\n%s", grepLines(text, "floodgate_connections_"))
	}
}

// startShedProc starts cmd and returns the addresses it prints on stdout
// in lines matching line (the first group a name, the second its
// address), once it printed those of every name of want. The process is
// ended with SIGTERM (by its PID) when the test ends.
func startShedProc(t *testing.T, cmd *exec.Cmd, line string, want ...string) map[string]string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("the process did not stop on SIGTERM:\n%s", stderr.String())
		}
	})
	re := regexp.MustCompile(line)
	found := make(chan [2]string, 8)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- [2]string{m[1], m[2]}
			}
		}
	}()
	addrs := map[string]string{}
	for deadline := time.After(60 * time.Second); ; {
		ok := true
		for _, w := range want {
			ok = ok && addrs[w] != ""
		}
		if ok {
			return addrs
		}
		select {
		case f := <-found:
			addrs[f[0]] = f[1]
		case <-done:
			t.Fatalf("the process ended at its start:\n%s", stderr.String())
		case <-deadline:
			t.Fatalf("the process did not say where it listens within 60s:\n%s", stderr.String())
		}
	}
}

// fillCap opens n connections to addr, each sending head (a request that
// never ends, or nothing), and returns them once each is known to be
// served: it reads a connection's first bytes when head is empty (gRPC's
// server writes its settings first), and none is answered otherwise.
func fillCap(t *testing.T, addr string, n int, head string) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for i := range n {
		c := dialShed(t, addr)
		cs = append(cs, c)
		if head != "" {
			if _, err := c.Write([]byte(head)); err != nil {
				closeConns(cs)
				t.Fatal(err)
			}
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 9)); err != nil {
			closeConns(cs)
			t.Fatalf("connection %d of %d, within the cap: %v", i+1, n, err)
		}
		_ = c.SetReadDeadline(time.Time{})
	}
	return cs
}

func dialShed(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readAll reads c until it is closed (or 10 s pass) and returns what came.
func readAll(t *testing.T, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a connection past the cap is still open after 10s")
	}
	return b
}

// statusOf returns the status of the answer c gets before it sends
// anything (0 when none comes within 10 s).
func statusOf(t *testing.T, c net.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func closeConns(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}
