//go:build unix

package keystore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/waittest"
	"github.com/floodgate/floodgate/policy"
)

// TestFileTurnedPipe: a named pipe that no one writes, renamed over the key
// store's file, is refused at once by the next read, and the keys read
// before keep working. Read with os.ReadFile, the read waited for a writer
// with the file's lock held, so every later change and refresh hung too.
func TestFileTurnedPipe(t *testing.T) {
	r := reloader(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	ctx := context.Background()
	b := NewFileBackend(path)
	s, err := New(ctx, Options{Backend: b, Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := s.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	defer func() { // let a reader that blocks go
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	err = waittest.Returns(t, "reading the key store's file", func() error { _, _, err := b.Load(ctx); return err })
	if err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Errorf("Load: %v, want the pipe refused", err)
	}
	waittest.Returns(t, "a refresh", func() struct{} { s.Refresh(ctx); return struct{}{} })
	if lookup(s, r.Policy(), raw) == nil {
		t.Error("the key read before stopped working")
	}
}
