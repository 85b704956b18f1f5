//go:build unix

package yamlfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/waittest"
)

// TestReadFileRefusesANamedPipe: a named pipe at the path (no writer ever
// opens it) is refused at once, by a problem naming the path, instead of
// blocking the reader forever.
func TestReadFileRefusesANamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	err := waittest.Returns(t, "ReadFile of a named pipe", func() error { _, err := ReadFile(path); return err })
	if _, ok := err.(Errors); !ok || err.Error() != path+": not a regular file (a named pipe); want a file, or a symbolic link to one" {
		t.Fatalf("got %v", err)
	}
}

// TestReadFileRefusesDevices: /dev/zero, endless, is refused without
// reading it.
func TestReadFileRefusesDevices(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Fatalf("no /dev/zero: %v", err)
	}
	err := waittest.Returns(t, "ReadFile of /dev/zero", func() error { _, err := ReadFile("/dev/zero"); return err })
	if err == nil || err.Error() != "/dev/zero: not a regular file (a device); want a file, or a symbolic link to one" {
		t.Fatalf("got %v", err)
	}
}

// TestReadFileFollowsLinks: a symbolic link to a regular file (as in a
// mounted Kubernetes ConfigMap) reads the file; a directory is refused.
func TestReadFileFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "..data", "policy.yaml")
	if err := os.MkdirAll(filepath.Dir(real), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "policy.yaml")
	if err := os.Symlink(filepath.Join("..data", "policy.yaml"), link); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(link); err != nil || string(data) != "version: 1\n" {
		t.Fatalf("link: %q, %v", data, err)
	}
	if _, err := ReadFile(dir); err == nil || !strings.HasSuffix(err.Error(), ": not a regular file (a directory); want a file, or a symbolic link to one") {
		t.Fatalf("directory: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.yaml")); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestReadFileTooLarge: a file larger than MaxFileSize is refused; one of
// exactly MaxFileSize bytes is read whole.
func TestReadFileTooLarge(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		size int64
		ok   bool
	}{{MaxFileSize, true}, {MaxFileSize + 1, false}, {1 << 40, false}} {
		path := filepath.Join(dir, "f.yaml")
		if err := os.Truncate(path, 0); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(c.size); err != nil { // sparse: costs no disk
			t.Fatal(err)
		}
		f.Close()
		data, err := ReadFile(path)
		if c.ok && (err != nil || int64(len(data)) != c.size) {
			t.Errorf("%d bytes: %d read, %v", c.size, len(data), err)
		}
		if !c.ok && (err == nil || err.Error() != path+": file is larger than 16777216 bytes") {
			t.Errorf("%d bytes: %v", c.size, err)
		}
	}
}
