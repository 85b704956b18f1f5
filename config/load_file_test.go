//go:build unix

package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefusesWhatIsNotAFile: a named pipe that no one writes, and
// /dev/zero, endless, are refused at once as invalid files naming the
// path (floodgate check --config /dev/zero ran out of memory).
func TestLoadRefusesWhatIsNotAFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "live.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	for path, kind := range map[string]string{fifo: "a named pipe", "/dev/zero": "a device"} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		done := make(chan error, 1)
		go func() { _, err := Load(path); done <- err }()
		select {
		case err := <-done:
			var errs Errors
			if !errors.As(err, &errs) || err.Error() != path+": not a regular file ("+kind+"); want a file, or a symbolic link to one" {
				t.Errorf("%s: got %v", path, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Load(%s) did not return", path)
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
