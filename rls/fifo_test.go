//go:build unix

package rls

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	done := make(chan error, 1)
	go func() { _, err := Load([]string{pipe}, LoadOptions{}); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), pipe+": not a regular file (a named pipe)") {
			t.Fatalf("Load of a named pipe: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Load of a named pipe did not return")
	}
}
