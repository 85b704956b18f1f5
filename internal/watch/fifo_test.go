//go:build unix

package watch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/waittest"
)

// TestRunSurvivesANamedPipe: a named pipe (that no one writes) renamed in
// place of a watched file is reported as a failure, naming the path, and
// does not block the watcher: the good file written after it is applied.
func TestRunSurvivesANamedPipe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.yaml")
	if err := os.WriteFile(path, []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &recorder{start: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Run(ctx, Options{Interval: 5 * time.Millisecond, Files: func() ([]string, error) { return []string{path}, nil },
			Apply: r.apply, Fail: r.fail})
		close(done)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("Run did not end")
		}
	}()
	wait := func(what string, ok func(applied []string, failed []error) bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			applied, _, failed := r.get()
			if ok(applied, failed) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: applied %q, failed %v", what, applied, failed)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("v1", func(a []string, _ []error) bool { return len(a) == 1 && a[0] == "v1" })

	fifo := filepath.Join(dir, "live.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	wait("the named pipe refused", func(_ []string, f []error) bool {
		return len(f) > 0 && strings.Contains(f[len(f)-1].Error(), path+": not a regular file (a named pipe)")
	})
	tmp := filepath.Join(dir, "live.tmp")
	if err := os.WriteFile(tmp, []byte("v2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	wait("v2 after the named pipe", func(a []string, _ []error) bool { return len(a) == 2 && a[1] == "v2" })
}

// TestReadRefusesANamedPipe: Read returns at once on a named pipe.
func TestReadRefusesANamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	err := waittest.Returns(t, "Read of a named pipe", func() error { _, err := Read([]string{path}); return err })
	if err == nil || err.Error() != "watch: "+path+": not a regular file (a named pipe); want a file, or a symbolic link to one" {
		t.Fatalf("got %v", err)
	}
}
