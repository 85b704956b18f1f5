package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRLSReloadsOnSIGHUP: floodgate rls, a process of its own, takes
// SIGHUP (systemctl reload, a closed terminal, a process manager's
// "reload") as a reload of its descriptor files, read at once, instead of
// dying of it; SIGTERM still ends it with status 0. Before, the signal
// killed it. The change here is written with its writer still holding
// the file open, which the watch of the files holds back for a minute:
// only the reload the signal asked for loads it within the test's wait.
func TestRLSReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"})
	_, env := envOf(rlsEnvFor(dir, nil))
	cmd, done, stderr, lines := rlsCommand(t, env, `^floodgate rls: debug .* on (\S+)$`)
	var debug string
	select {
	case addr := <-lines:
		debug = "http://" + addr
	case err := <-done:
		t.Fatalf("floodgate rls ended before it served: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("floodgate rls did not start:\n%s", stderr.String())
	}
	rlconfig := func() string {
		_, body := httpGet(t, debug+"/rlconfig")
		return body
	}
	if got := rlconfig(); !strings.Contains(got, "requests_per_unit=2") {
		t.Fatalf("/rlconfig at start: %q", got)
	}

	// A new version, its writer still holding the file open.
	f, err := os.OpenFile(filepath.Join(dir, "ratelimit", "config", "a.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the watch has seen the write by now
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(rlconfig(), "requests_per_unit=7") {
		select {
		case err := <-done:
			t.Fatalf("floodgate rls ended at SIGHUP: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after SIGHUP the new version is not loaded: /rlconfig %q\n%s", rlconfig(), stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The watch may have loaded the new version before the signal came:
	// the line that says what SIGHUP did may then follow the version.
	for !strings.Contains(stderr.String(), "rls: SIGHUP: reading the descriptor files") {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say what SIGHUP did:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	termExits0(t, cmd, done, "floodgate rls after SIGHUP")
}

// rlsCommand runs floodgate rls as a process of its own (this test binary,
// which runs main) with env, killed when the test ends if it still runs.
// It returns the command, its end (put back by whoever takes it, so that
// the cleanup sees it), its standard error, and the first group of every
// line of its standard output that matches line.
func rlsCommand(t *testing.T, env []string, line string, args ...string) (*exec.Cmd, chan error, *lockedBuffer, <-chan string) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"rls"}, args...)...)
	cmd.Env = append(env, runMainEnv+"=1", "PATH="+os.Getenv("PATH"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-done:
			done <- err
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	re := regexp.MustCompile(line)
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case lines <- m[1]:
				default:
				}
			}
		}
	}()
	return cmd, done, stderr, lines
}
