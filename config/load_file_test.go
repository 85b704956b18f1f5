//go:build unix

package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/waittest"
)

// TestLoadReadsStreamsWithinBounds: a command that runs once (floodgate
// check) reads its file from a named pipe as its writer sends it, and
// /dev/zero, endless, only up to MaxFileSize before refusing it as too
// large (floodgate check --config /dev/zero ran out of memory); a
// directory is refused.
func TestLoadReadsStreamsWithinBounds(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "live.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		_, _ = w.WriteString("version: 1\nlimits:\n  - {name: a, rate: 5, burst: 5}\n")
		_ = w.Close()
	}()
	if f, err := Load(fifo); err != nil || len(f.Limits) != 1 {
		t.Errorf("a named pipe's policy: %v", err)
	}
	for path, want := range map[string]string{
		"/dev/zero": "/dev/zero: file is larger than 16777216 bytes",
		dir:         dir + ": not a regular file (a directory); want a file, or a symbolic link to one",
	} {
		err := waittest.Returns(t, "Load("+path+")", func() error { _, err := Load(path); return err })
		var errs Errors
		if !errors.As(err, &errs) || err.Error() != want {
			t.Errorf("%s: got %v, want %s", path, err, want)
		}
	}
}

// TestLoadRefusesALargeFileCheaply: a policy file just under MaxFileSize
// of a few bytes a value is refused before it is parsed: loading it
// allocates a small multiple of its size (it took 1.7 GB).
func TestLoadRefusesALargeFileCheaply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	data := make([]byte, 0, MaxFileSize)
	data = append(data, "version: 1\nx: ["...)
	for len(data) < MaxFileSize-4 {
		data = append(data, "a,"...)
	}
	data = append(data, "a]\n"...)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	data = nil
	alloc := allocated(func() {
		_, err := Load(path)
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Line != 2 {
			t.Errorf("got %.300v", err)
		}
	})
	if alloc > 200<<20 {
		t.Errorf("refusing a 16 MB file allocated %d MB, want under 200 MB", alloc>>20)
	}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
