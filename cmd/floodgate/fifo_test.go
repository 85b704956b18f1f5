//go:build unix

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSurvivesANamedPipeConfig renames a named pipe (that no one
// writes) over the policy file of a running serve and sends SIGHUP: the
// reload and the watcher refuse it, the good file written next is applied,
// and serve still stops. The watcher and SIGHUP blocked forever on it, and
// serve then ignored SIGTERM.
func TestServeSurvivesANamedPipeConfig(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "live.yaml")
	writeHourly(t, cfg, up.URL, 2)
	gw, _, stop, _, logs := startServeLogged(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	awaitPolicy(t, gw, `"hourly";q=2`, 20*time.Second, "the first policy")
	fifo := filepath.Join(dir, "live.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, cfg); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), "not a regular file (a named pipe)") {
		if time.Now().After(deadline) {
			t.Fatalf("the named pipe was never refused; logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tmp := filepath.Join(dir, "live.tmp")
	writeHourly(t, tmp, up.URL, 10)
	if err := os.Rename(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	awaitPolicy(t, gw, `"hourly";q=10`, time.Minute, "the good file after the named pipe")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestServeRefusesAKeyFileThatCannotBeRead: a JWT key file turned into a
// named pipe that no one writes, then into a link to /dev/zero, is refused
// at once by each reload (SIGHUP) that reads it; the running policy stays,
// the good files written next are applied, and serve stops. os.ReadFile
// waited on the pipe forever, holding up every later reload, and read
// /dev/zero until memory ran out.
func TestServeRefusesAKeyFileThatCannotBeRead(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	key := filepath.Join(dir, "secret.txt")
	secret := []byte("0123456789abcdef0123456789abcdef")
	if err := os.WriteFile(key, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "live.yaml")
	policy := `version: 1
server:
  user:
    jwt: {alg: HS256, key_file: secret.txt}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: hourly, rate: 1, per: 1h, burst: %d, key: global}
`
	writePolicy := func(burst int) {
		t.Helper()
		if err := os.WriteFile(cfg+".tmp", []byte(fmt.Sprintf(policy, up.URL, burst)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg+".tmp", cfg); err != nil {
			t.Fatal(err)
		}
	}
	writePolicy(100)
	gw, _, stop, _, logs := startServeLogged(t, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	awaitPolicy(t, gw, `"hourly";q=100`, 20*time.Second, "the first policy")
	// Whoever would block on the pipe is let go at the end: opening it to
	// write succeeds once a reader waits, and closing it ends the read.
	defer func() {
		if f, err := os.OpenFile(key, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	fifo := filepath.Join(dir, "secret.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, key); err != nil {
		t.Fatal(err)
	}
	writePolicy(200)
	reloadRefused := func(kind string) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		want := "not a regular file (" + kind + ")"
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("the key file as %s was never refused; logs:\n%s", kind, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		awaitPolicy(t, gw, `"hourly";q=100`, 20*time.Second, "the running policy after refusing "+kind)
	}
	reloadRefused("a named pipe")
	link := filepath.Join(dir, "secret.link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link, key); err != nil {
		t.Fatal(err)
	}
	reloadRefused("a device")
	if err := os.WriteFile(key+".tmp", secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(key+".tmp", key); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	awaitPolicy(t, gw, `"hourly";q=200`, time.Minute, "the good files after the refused ones")
	if err := stop(); err != nil {
		t.Fatalf("%v; logs:\n%s", err, logs.String())
	}
}
