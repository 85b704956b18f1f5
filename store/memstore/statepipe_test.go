//go:build unix

package memstore_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/waittest"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestStateFileTurnedPipe: a named pipe that no one writes, at the state
// file's path, is refused at once: the store starts empty and says why,
// and its snapshot puts a file in the pipe's place. Read with os.ReadFile,
// it held up the start for as long as no one wrote to the pipe.
func TestStateFileTurnedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.state")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	defer func() { // let a reader that blocks go
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	s := waittest.Returns(t, "starting on a pipe", func() *memstore.Store {
		return newStore(t, memstore.Options{StatePath: path, SnapshotInterval: -1, SweepInterval: -1})
	})
	if err := s.Stats().LoadError; err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Errorf("LoadError: %v, want the pipe refused", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		t.Errorf("after the snapshot the path holds %v (%v), want a file", st.Mode(), err)
	}
}
