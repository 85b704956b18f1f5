//go:build unix

package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testcerts"
	"github.com/floodgate/floodgate/internal/waittest"
	"github.com/floodgate/floodgate/policy"
)

// TestCertificateTurnedPipeKeepsServing: a named pipe that no one writes,
// renamed over a served certificate, is refused when the certificate is
// read again, and the handshakes go on with the one read before. With
// os.ReadFile the read waited for a writer forever while holding the
// certificate's lock, so every handshake after it hung.
func TestCertificateTurnedPipeKeepsServing(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "t")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Server("srv")
	if err != nil {
		t.Fatal(err)
	}
	cr := &certReloader{cert: p.Cert, key: p.Key}
	first, err := cr.load()
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, p.Cert); err != nil {
		t.Fatal(err)
	}
	// A file's times move with the kernel's tick: the pipe may carry the
	// certificate's own, which would hide the change.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(p.Cert, later, later); err != nil {
		t.Fatal(err)
	}
	// The whole test's reads end even on a build that blocks: opening
	// the pipe to write lets a reader go.
	defer func() {
		if f, err := os.OpenFile(p.Cert, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	cr.mu.Lock()
	cr.look.checked = time.Time{} // look at the files at the next handshake
	cr.mu.Unlock()
	got := waittest.Returns(t, "a handshake's certificate", func() *tls.Certificate {
		c, _ := cr.get(&tls.ClientHelloInfo{})
		return c
	})
	if got != first {
		t.Errorf("the handshake got %p, want the certificate read before (%p)", got, first)
	}
	err = waittest.Returns(t, "a reload of the certificate", cr.reload)
	if err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Errorf("reload: %v, want the pipe refused", err)
	}
}

// TestStopsWhileAReloadHangs: serve's loop returns when its context ends,
// whatever a reload it started is doing (a file on a hung network disk:
// here, a reload held in its last step).
func TestStopsWhileAReloadHangs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(burst int) {
		t.Helper()
		body := fmt.Sprintf("version: 1\nroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: \"http://127.0.0.1:9\"}\n"+
			"limits:\n  - {name: hourly, rate: 1, per: 1h, burst: %d, key: global}\n", burst)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(2)
	var hold atomic.Bool
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	r, err := policy.NewReloader(policy.ReloaderOptions{Path: path, OnReload: func(*policy.Policy) {
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	write(10)
	s := &server{log: slog.New(slog.DiscardHandler), cfg: &ServeOptions{Config: path}, reloader: r}
	s.root = &root{errc: make(chan error)}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() { done <- s.run(ctx, hup) }()
	hup <- syscall.SIGHUP
	select {
	case <-entered:
	case <-time.After(waittest.Wait):
		t.Fatal("the reload never began")
	}
	cancel()
	if err := waittest.Returns(t, "serve's loop with a reload hanging", func() error { return <-done }); err != nil {
		t.Errorf("run: %v", err)
	}
}
