//go:build unix

package regfile_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/regfile"
	"github.com/floodgate/floodgate/internal/waittest"
)

// TestRead: a regular file, and a link to one, are read whole up to the
// bound; one byte past it is refused naming the file and the bound.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	want := bytes.Repeat([]byte("x"), 100)
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, link} {
		got, err := regfile.Read(p, 100)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Read(%s, 100): %d bytes, %v", p, len(got), err)
		}
	}
	_, err := regfile.Read(path, 99)
	var bad *regfile.Error
	if !errors.As(err, &bad) || bad.Path != path || !strings.Contains(err.Error(), "larger than 99 bytes") {
		t.Errorf("Read(100 bytes, 99): %v", err)
	}
	if _, err := regfile.Read(filepath.Join(dir, "none"), 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want os.ErrNotExist", err)
	}
}

// TestRefusesOtherKinds: a named pipe no one writes, a device that never
// ends and a directory are refused at once, each named; a socket cannot
// even be opened.
func TestRefusesOtherKinds(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := regfile.Read(sock, regfile.Own); err == nil {
		t.Error("a socket was read")
	}
	for path, kind := range map[string]string{fifo: "a named pipe", zero: "a device", dir: "a directory"} {
		err := waittest.Returns(t, "reading "+kind, func() error { _, err := regfile.Read(path, regfile.Own); return err })
		var bad *regfile.Error
		if !errors.As(err, &bad) || !strings.Contains(bad.Msg, "not a regular file ("+kind+")") {
			t.Errorf("%s: %v", kind, err)
		}
	}
}

// TestAppend: a regular file is opened to append (and created); a named
// pipe is refused at once, whether or not a reader holds it open, where
// opening it to write waited for a reader.
func TestAppend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log")
	for i := range 2 {
		f, err := regfile.Append(path, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("line\n"); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if b, _ := os.ReadFile(path); string(b) != strings.Repeat("line\n", i+1) {
			t.Errorf("after %d appends: %q", i+1, b)
		}
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	err := waittest.Returns(t, "appending to a pipe no one reads", func() error { _, err := regfile.Append(fifo, 0o600); return err })
	if err == nil {
		t.Error("a pipe with no reader was opened to append")
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = regfile.Append(fifo, 0o600)
	var bad *regfile.Error
	if !errors.As(err, &bad) || !strings.Contains(bad.Msg, "a named pipe") {
		t.Errorf("a pipe with a reader: %v, want it refused", err)
	}
}
