//go:build unix

package rls

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/waittest"
)

// TestLoadRefusesANamedPipe: a named pipe among the descriptor files, named
// or linked from a directory read, is refused at once, naming it, as the
// rate-limit service starts: it once waited for a writer forever.
func TestLoadRefusesANamedPipe(t *testing.T) {
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	err := waittest.Returns(t, "Load of a named pipe", func() error { _, err := Load([]string{pipe}, LoadOptions{}); return err })
	if err == nil || !strings.Contains(err.Error(), pipe+": not a regular file (a named pipe)") {
		t.Fatalf("Load of a named pipe: %v", err)
	}
}
