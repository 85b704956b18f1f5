package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// proc is one floodgate serve process.
type proc struct {
	gw, admin string
	cmd       *exec.Cmd
	out       *lockedBuffer
	done      chan struct{}
}

// startProc starts "floodgate serve" with args in its own process (the
// test binary, which runs main) and waits for it to say where it listens.
func startProc(t testing.TB, args ...string) *proc {
	t.Helper()
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve"}, withOps(args)...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return startProcCmd(t, cmd)
}

// startProcCmd starts cmd, a floodgate serve, and waits for it to say
// where it listens.
func startProcCmd(t testing.TB, cmd *exec.Cmd) *proc {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	p := &proc{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// copied closes once every line the process wrote is in p.out, so
	// that p.done means its output is all there.
	copied := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		pw.Close()
		<-copied
		close(p.done)
	}()
	gwRe := regexp.MustCompile(`gateway on (http://\S+)`)
	adRe := regexp.MustCompile(`admin on (https?://\S+)`)
	found := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.out.Write([]byte(line + "\n"))
			if m := gwRe.FindStringSubmatch(line); m != nil {
				p.gw = m[1]
			}
			if m := adRe.FindStringSubmatch(line); m != nil {
				p.admin = m[1]
				close(found)
			}
		}
		_, _ = io.Copy(io.Discard, pr) // past a line too long to scan
	}()
	select {
	case <-found:
	case <-p.done:
		t.Fatalf("serve ended early:\n%s", p.out.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("serve did not start:\n%s", p.out.String())
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the process with SIGTERM and waits for it.
func (p *proc) stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("serve did not stop on SIGTERM:\n%s", p.out.String())
	}
}

// call makes an admin API call with token (none when empty) and decodes
// the JSON answer into out (when not nil).
func call(t testing.TB, method, url, token string, body any, out any) int {
	t.Helper()
	code, data := rawCall(t, method, url, token, body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
	return code
}

// status sends a GET to url with the API key and returns the status.
func status(t testing.TB, url, apiKey string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if apiKey != "" {
		req.Header.Set("x-api-key", apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitUntil polls cond every 10 ms until it holds or the deadline passes,
// and returns how long it took.
func waitUntil(t testing.TB, what string, deadline time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > deadline {
			t.Fatalf("timed out after %v waiting for %s", deadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// consoleConfig writes a policy file with an admin token "ops-token"
// (and "viewer-token"), a route that requires an API key and one that
// does not, and the plans given in YAML.
func consoleConfig(t testing.TB, dir, server, plans string) string {
	t.Helper()
	up := newUpstream(t)
	cfg := filepath.Join(dir, "fg.yaml")
	data := fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:0"
  # The tests poll with keys an instance does not know yet: room for that.
  unknown_key_limit: {rate: 100000, per: 1m, burst: 100000}
  admin:
    tokens:
      - {name: ops, sha256: %q}
      - {name: viewer, sha256: %q}
%s
routes:
  - name: partner
    match: {paths: ["/partner/**"]}
    upstream: %s
    api_key_required: true
  - name: open
    match: {paths: ["/**"]}
    upstream: %s
plans:
%s
`, sha256Hex("ops-token"), sha256Hex("viewer-token"), server, up, up, plans)
	if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newUpstream starts a small upstream that answers 200 to everything.
func newUpstream(t testing.TB) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
