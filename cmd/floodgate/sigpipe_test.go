package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestServeOutlivesItsLogReader: floodgate serve writes its access log to
// standard output and its log to standard error, both a pipe whose reader
// (a log shipper, "| tee", "| logger") goes away once serve has started.
// The gateway keeps serving requests and reloads instead of being killed
// by SIGPIPE at its next line, and SIGTERM still ends it with status 0.
func TestServeOutlivesItsLogReader(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	policy := fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: per-ip
    rate: 1000
    burst: 1000
    key: client_ip
`, up.URL)
	cfg := writeConfig(t, policy)
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--admin-listen", "off", "--ops-listen", "127.0.0.1:0",
		"--access-log", "-", "--watch=false")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1) // holds Wait's error once the process has ended
	go func() { done <- cmd.Wait() }()
	defer func() {
		select {
		case err := <-done:
			done <- err
		default:
			_ = cmd.Process.Kill()
		}
	}()

	// Read what serve says until it names the ops listener, then go away.
	gwRe := regexp.MustCompile(`gateway on (http://\S+)`)
	opsRe := regexp.MustCompile(`ops on (http://\S+)`)
	var gw, ops string
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
			if opsRe.MatchString(sc.Text()) {
				return
			}
		}
	}()
	deadline := time.After(60 * time.Second)
	for ops == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("serve ended before it named its listeners")
			}
			if m := gwRe.FindStringSubmatch(line); m != nil {
				gw = m[1]
			}
			if m := opsRe.FindStringSubmatch(line); m != nil {
				ops = m[1]
			}
		case <-deadline:
			t.Fatal("serve did not start within 60 s")
		}
	}
	r.Close()

	client := &http.Client{Timeout: 30 * time.Second}
	for i := range 20 {
		resp, err := client.Get(gw + "/x")
		if err != nil {
			t.Fatalf("request %d after the log's reader left: %v (%s)", i, err, exitOf(done))
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	// A reload of a changed file logs a line on standard error.
	if err := os.WriteFile(cfg, []byte(regexp.MustCompile(`burst: 1000`).ReplaceAllString(policy, "burst: 999")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a reload logged after the reader left", 30*time.Second, func() bool {
		resp, err := client.Get(ops + "/metrics")
		if err != nil {
			t.Fatalf("the ops listener after a reload: %v (%s)", err, exitOf(done))
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return regexp.MustCompile(`(?m)^floodgate_config_reloads_total\S* [1-9]`).Match(b)
	})
	if resp, err := client.Get(gw + "/x"); err != nil {
		t.Fatalf("a request after the reload: %v (%s)", err, exitOf(done))
	} else {
		resp.Body.Close()
	}

	termExits0(t, cmd, done, "serve")
}

// exitOf says how the process whose Wait reports on done ended, if it has.
func exitOf(done chan error) string {
	select {
	case err := <-done:
		done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "the process ended: " + ee.ProcessState.String()
		}
		return fmt.Sprintf("the process ended: %v", err)
	case <-time.After(2 * time.Second):
		return "the process still runs"
	}
}

// TestRLSOutlivesItsLogReader: floodgate rls logs on standard error, a
// pipe whose reader goes away once the service has started; a descriptor
// file changed then is loaded and logged, and the service goes on
// answering instead of being killed by SIGPIPE, then exits 0 on SIGTERM.
func TestRLSOutlivesItsLogReader(t *testing.T) {
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n"})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "rls")
	cmd.Env = []string{runMainEnv + "=1", "PATH=" + os.Getenv("PATH"), "BACKEND_TYPE=memory"}
	for k, v := range rlsEnvFor(dir, nil) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1) // holds Wait's error once the process has ended
	go func() { done <- cmd.Wait() }()
	defer func() {
		select {
		case err := <-done:
			done <- err
		default:
			_ = cmd.Process.Kill()
		}
	}()

	// Read until the service names its three listeners, then go away.
	re := regexp.MustCompile(`^floodgate rls: (\S+).* on (\S+)$`)
	addrs := make(chan map[string]string, 1)
	go func() {
		m := map[string]string{}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if g := re.FindStringSubmatch(sc.Text()); g != nil {
				if m[g[1]] = g[2]; len(m) == 3 {
					addrs <- m
					return
				}
			}
		}
	}()
	var a map[string]string
	select {
	case a = <-addrs:
	case <-time.After(60 * time.Second):
		t.Fatalf("floodgate rls did not name its listeners within 60 s (%s)", exitOf(done))
	}
	r.Close()

	writeRuntime(t, dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 7}}\n"})
	client := &http.Client{Timeout: 30 * time.Second}
	waitUntil(t, "the changed descriptor file loaded after the reader left", 60*time.Second, func() bool {
		resp, err := client.Get("http://" + a["debug"] + "/rlconfig")
		if err != nil {
			t.Fatalf("/rlconfig: %v (%s)", err, exitOf(done))
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return regexp.MustCompile(`requests_per_unit=7`).Match(b)
	})
	// The draining that SIGTERM starts is logged too: the exit status
	// below says whether that line killed the process.
	resp, err := client.Get("http://" + a["HTTP"] + "/healthcheck")
	if err != nil {
		t.Fatalf("/healthcheck after the load: %v (%s)", err, exitOf(done))
	}
	resp.Body.Close()

	termExits0(t, cmd, done, "floodgate rls")
}

// termExits0 sends SIGTERM to cmd, a process of this test binary whose
// Wait's error done holds once it ended (and holds again after), and
// fails the test unless it exits with status 0 within 60 s.
func termExits0(t *testing.T, cmd *exec.Cmd, done chan error, what string) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("%s ended with %v after SIGTERM; want status 0", what, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not end within 60 s of SIGTERM", what)
	}
}
