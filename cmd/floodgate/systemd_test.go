package main

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeNotifiesSystemd runs floodgate serve as systemd runs a
// Type=notify service with WatchdogSec=: with a NOTIFY_SOCKET of the
// test's own and WATCHDOG_USEC. Its first message is READY=1, sent when
// the gateway, admin and ops listeners all accept connections; WATCHDOG=1
// follows at half the watchdog's interval; SIGHUP brings RELOADING=1 (with
// MONOTONIC_USEC) then READY=1; SIGTERM brings STOPPING=1, and the process
// exits with status 0.
func TestServeNotifiesSystemd(t *testing.T) {
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	cfg := writeConfig(t, "version: 1\nroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: none}\n")
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", anyPort, "--admin-listen", anyPort, "--ops-listen", anyPort, "--watch=false", "--log-level", "warn")
	const watchdog = 400 * time.Millisecond
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case err := <-exited:
			t.Fatalf("serve exited (%v) before %s:\n%s", err, what, out.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s from serve:\n%s", what, out.String())
		}
		return ""
	}
	// until returns the next message that starts with prefix, skipping
	// the watchdog's.
	until := func(prefix string) string {
		t.Helper()
		for {
			m := next(prefix)
			if strings.HasPrefix(m, prefix) {
				return m
			}
			if m != "WATCHDOG=1" {
				t.Fatalf("waiting for %s: got %q", prefix, m)
			}
		}
	}

	first := next("READY=1")
	if !strings.HasPrefix(first, "READY=1\n") && first != "READY=1" {
		t.Fatalf("first message %q, want READY=1", first)
	}
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

	start := time.Now()
	for range 2 {
		if m := next("WATCHDOG=1"); m != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", m)
		}
	}
	if d := time.Since(start); d > 4*watchdog {
		t.Errorf("two watchdog pings took %v; the watchdog's interval is %v", d, watchdog)
	}

	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if m := until("RELOADING=1"); !strings.Contains(m, "\nMONOTONIC_USEC=") {
		t.Errorf("reload message %q has no MONOTONIC_USEC", m)
	}
	until("READY=1")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	until("STOPPING=1")
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v, want exit status 0\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit after SIGTERM:\n%s", out.String())
	}
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
