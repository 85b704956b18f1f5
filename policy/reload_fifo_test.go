//go:build unix

package policy

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/waittest"
)

// TestReloadRefusesANamedPipe puts a named pipe (that no one writes) in
// place of the policy file of a running Reloader: SIGHUP's Reload and the
// watcher refuse it at once, naming the path, the running policy stays,
// and the next good file is applied; a Reloader cannot start on one.
func TestReloadRefusesANamedPipe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.yaml")
	writeFile(t, path, reloadV1)
	logs := &syncBuffer{}
	applied := make(chan *Policy, 4)
	rl, err := NewReloader(ReloaderOptions{Path: path, Interval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), OnReload: func(p *Policy) { applied <- p }})
	if err != nil {
		t.Fatal(err)
	}
	running := rl.Policy()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rl.Run(ctx); close(done) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("Run did not end")
		}
	}()

	fifo := filepath.Join(dir, "live.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	err = waittest.Returns(t, "Reload of a named pipe", rl.Reload)
	var errs config.Errors
	if !errors.As(err, &errs) || err.Error() != path+": not a regular file (a named pipe); want a file, or a symbolic link to one" {
		t.Fatalf("Reload: %v", err)
	}
	if rl.Policy() != running || rl.Rejected() == 0 {
		t.Fatalf("after the named pipe: policy replaced or not rejected (%d)", rl.Rejected())
	}
	err = waittest.Returns(t, "NewReloader on a named pipe", func() error {
		_, err := NewReloader(ReloaderOptions{Path: path})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("NewReloader: %v", err)
	}

	writeFile(t, path, reloadV1+"  - {name: added, rate: 7}\n")
	select {
	case p := <-applied:
		if _, ok := p.Limit("added"); !ok {
			t.Error("the new version is not the current policy")
		}
	case <-time.After(time.Minute):
		t.Fatalf("the good file after the named pipe was never applied; logs:\n%s", logs.String())
	}
}
