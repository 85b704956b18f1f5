//go:build unix

package admin

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

// TestAuditFileTurnedPipe: a named pipe that no one reads or writes,
// renamed over the audit log, makes appending and listing fail at once,
// naming it. Opened with os.OpenFile and read with os.ReadFile, both
// waited forever with the log's lock held, and every admin change waited
// behind them.
func TestAuditFileTurnedPipe(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	a := NewFileAudit(path, 4)
	e := Entry{Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Actor: "ops", Action: "key.revoke", Target: "k"}
	if err := a.Append(ctx, e); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	defer func() { // let a reader or a writer that blocks go
		for _, flag := range []int{os.O_WRONLY, os.O_RDONLY} {
			if f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
	}()
	if err := waittest.Returns(t, "appending", func() error { return a.Append(ctx, e) }); err == nil {
		t.Error("an entry was appended to a pipe")
	}
	err := waittest.Returns(t, "listing", func() error { _, err := NewFileAudit(path, 4).List(ctx, Query{}); return err })
	if err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Errorf("List: %v, want the pipe refused", err)
	}
}
