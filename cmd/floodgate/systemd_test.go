package main

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notified is a floodgate process run as systemd runs a Type=notify
// service with WatchdogSec=400ms: with a NOTIFY_SOCKET of the test's own
// and WATCHDOG_USEC.
type notified struct {
	cmd    *exec.Cmd
	out    *lockedBuffer // its stdout and stderr
	msgs   chan string   // what it sent to the socket, one message each
	exited chan error
}

// notifyWatchdog is the watchdog's interval that runNotified gives.
const notifyWatchdog = 400 * time.Millisecond

// runNotified starts this test binary as floodgate with args and env (on
// top of this process' environment), and stops it at the test's end if
// it still runs.
func runNotified(t *testing.T, args []string, env ...string) *notified {
	t.Helper()
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p := &notified{out: &lockedBuffer{}, msgs: make(chan string, 100), exited: make(chan error, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(p.msgs)
				return
			}
			p.msgs <- string(buf[:n])
		}
	}()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(append(os.Environ(), runMainEnv+"=1", "NOTIFY_SOCKET="+sock,
		"WATCHDOG_USEC="+strconv.FormatInt(notifyWatchdog.Microseconds(), 10)), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// next returns the process' next message (what names it for a failure).
func (p *notified) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case m := <-p.msgs:
		return m
	case err := <-p.exited:
		t.Fatalf("%s exited (%v) before %s:\n%s", p.cmd.Args[1], err, what, p.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s from %s:\n%s", what, p.cmd.Args[1], p.out.String())
	}
	return ""
}

// until returns the next message that starts with prefix, skipping the
// watchdog's.
func (p *notified) until(t *testing.T, prefix string) string {
	t.Helper()
	for {
		m := p.next(t, prefix)
		if strings.HasPrefix(m, prefix) {
			return m
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("waiting for %s: got %q", prefix, m)
		}
	}
}

// ready checks that the first message is READY=1.
func (p *notified) ready(t *testing.T) {
	t.Helper()
	if first := p.next(t, "READY=1"); !strings.HasPrefix(first, "READY=1\n") && first != "READY=1" {
		t.Fatalf("first message %q, want READY=1", first)
	}
}

// watchdogPings checks that two WATCHDOG=1 come within twice the
// watchdog's interval each.
func (p *notified) watchdogPings(t *testing.T) {
	t.Helper()
	start := time.Now()
	for range 2 {
		if m := p.next(t, "WATCHDOG=1"); m != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", m)
		}
	}
	if d := time.Since(start); d > 4*notifyWatchdog {
		t.Errorf("two watchdog pings took %v; the watchdog's interval is %v", d, notifyWatchdog)
	}
}

// stops sends SIGTERM and checks that STOPPING=1 comes and the process
// exits with status 0.
func (p *notified) stops(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.until(t, "STOPPING=1")
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0\n%s", p.cmd.Args[1], err, p.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM:\n%s", p.cmd.Args[1], p.out.String())
	}
}

// TestServeNotifiesSystemd runs floodgate serve as systemd runs a
// Type=notify service with WatchdogSec=: with a NOTIFY_SOCKET of the
// test's own and WATCHDOG_USEC. Its first message is READY=1, sent when
// the gateway, admin and ops listeners all accept connections; WATCHDOG=1
// follows at half the watchdog's interval; SIGHUP brings RELOADING=1 (with
// MONOTONIC_USEC) then READY=1; SIGTERM brings STOPPING=1, and the process
// exits with status 0.
func TestServeNotifiesSystemd(t *testing.T) {
	cfg := writeConfig(t, "version: 1\nroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: none}\n")
	p := runNotified(t, []string{"serve", "--config", cfg, "--listen", anyPort, "--admin-listen", anyPort,
		"--ops-listen", anyPort, "--watch=false", "--log-level", "warn"})
	out := p.out
	p.ready(t)
	// READY=1 came after every listener was open: each accepts now. The
	// lines that say where reach out through a pipe of their own: wait
	// for the last.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "admin on") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	gw, admin, ops := listenedOn(t, out.String(), "gateway"), listenedOn(t, out.String(), "admin"), listenedOn(t, out.String(), "ops")
	for _, a := range []string{gw, admin, ops} {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			t.Errorf("READY=1 was sent before %s listened: %v", a, err)
			continue
		}
		c.Close()
	}
	if code, _, body := get(t, "http://"+ops+"/readyz"); code != 200 {
		t.Errorf("/readyz after READY=1: %d %q", code, body)
	}
	p.watchdogPings(t)

	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if m := p.until(t, "RELOADING=1"); !strings.Contains(m, "\nMONOTONIC_USEC=") {
		t.Errorf("reload message %q has no MONOTONIC_USEC", m)
	}
	p.until(t, "READY=1")
	p.stops(t)
}

// TestRLSNotifiesSystemd runs floodgate rls as a Type=notify service with
// a watchdog, as TestServeNotifiesSystemd runs serve: READY=1 first, sent
// when its gRPC, HTTP and debug listeners all accept connections;
// WATCHDOG=1 at half the watchdog's interval; SIGTERM brings STOPPING=1
// and exit status 0.
func TestRLSNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n"})
	var env []string
	for k, v := range rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory"}) {
		env = append(env, k+"="+v)
	}
	p := runNotified(t, []string{"rls"}, env...)
	p.ready(t)
	// READY=1 came after every listener was open: each accepts now. The
	// lines that say where reach out through a pipe of their own: wait
	// for the third.
	where := regexp.MustCompile(`(?m)^floodgate rls: \S+.* on (\S+)$`)
	addrs := where.FindAllStringSubmatch(p.out.String(), -1)
	for deadline := time.Now().Add(10 * time.Second); len(addrs) < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		addrs = where.FindAllStringSubmatch(p.out.String(), -1)
	}
	if len(addrs) != 3 {
		t.Fatalf("rls said where %d listeners are, want 3:\n%s", len(addrs), p.out.String())
	}
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a[1], time.Second)
		if err != nil {
			t.Errorf("READY=1 was sent before %s listened: %v", a[1], err)
			continue
		}
		c.Close()
	}
	p.watchdogPings(t)
	p.stops(t)
}

// TestSystemdUnit holds deploy/systemd/floodgate.service to what serve
// does: a Type=notify service with a watchdog, whose ExecStart gives flags
// serve takes, reloaded with SIGHUP, stopped with SIGTERM given more time
// than the drain; systemd's own checker finds nothing wrong with it
// (systemd-analyze verify) and rates its exposure at most 2.0 of 10
// (systemd-analyze security, offline).
func TestSystemdUnit(t *testing.T) {
	const unit = "../../deploy/systemd/floodgate.service"
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	service := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#':
		case line[0] == '[':
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			service[k] = append(service[k], v)
		}
	}
	one := func(k string) string {
		if len(service[k]) != 1 {
			t.Errorf("[Service] %s: %q, want one value", k, service[k])
			return ""
		}
		return service[k][0]
	}
	for k, want := range map[string]string{"Type": "notify", "NotifyAccess": "main", "KillSignal": "SIGTERM",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "DynamicUser": "yes", "ExecReload": "/bin/kill -HUP $MAINPID"} {
		if got := one(k); got != want {
			t.Errorf("[Service] %s=%s, want %s", k, got, want)
		}
	}
	if d, err := time.ParseDuration(one("WatchdogSec")); err != nil || d <= 0 {
		t.Errorf("WatchdogSec: %v", err)
	}
	start := strings.Fields(one("ExecStart"))
	if len(start) < 2 || start[1] != "serve" {
		t.Fatalf("ExecStart %q does not run floodgate serve", start)
	}
	flags, err := parseServeFlags(start[2:], io.Discard)
	if err != nil {
		t.Fatalf("ExecStart's flags: %v", err)
	}
	if stop, err := time.ParseDuration(one("TimeoutStopSec")); err != nil || stop <= flags.ShutdownTimeout {
		t.Errorf("TimeoutStopSec %s (%v) leaves the drain (--shutdown-timeout %v) no room", one("TimeoutStopSec"), err, flags.ShutdownTimeout)
	}
	if pre := strings.Fields(one("ExecStartPre")); len(pre) < 4 || pre[1] != "check" || pre[3] != flags.Config {
		t.Errorf("ExecStartPre %q does not check the policy file serve reads (%s)", pre, flags.Config)
	}

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is missing (Debian's systemd package)")
		}
		t.Skip("systemd-analyze is missing")
	}
	// systemd checks that the binary exists: the copy runs this one.
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copy := filepath.Join(dir, "floodgate.service")
	if err := os.WriteFile(copy, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/floodgate", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", copy).CombinedOutput()
	if err != nil || strings.Contains(string(out), copy) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", "--threshold=20", copy).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security rates the unit above 2.0: %v\n%s", err, out)
	}
}
