//go:build unix

package accesslog

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/waittest"
)

// logAll logs n records, each once the buffer took it.
func logAll(l *Logger, n int) {
	for range n {
		for {
			before := l.Stats().Dropped
			l.Log(sample())
			if l.Stats().Dropped == before {
				break
			}
			l.kickWriter()
		}
	}
}

// TestNamedPipe: a log that is a named pipe is written to while a process
// reads it; with no reader New says so at once (opening it to write waited
// for one, and held up the gateway's start and its SIGTERM); and when the
// reader stops reading, Close gives up after CloseWait, so the gateway
// still stops (it waited on the write for ever).
func TestNamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.pipe")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	defer func() { // let a writer that blocks go
		if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	err := waittest.Returns(t, "New with no reader", func() error { _, err := New(Options{Path: path}); return err })
	if err == nil || !strings.Contains(err.Error(), "no process reads") {
		t.Fatalf("New: %v, want the missing reader named", err)
	}

	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := New(Options{Path: path, MaxSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	logAll(l, 10)
	l.kickWriter()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.Contains(line, "/students/9") {
		t.Fatalf("the reader got %q, %v", line, err)
	}
	// Past the pipe's buffer with no one reading: the writer waits, and
	// the records past the logger's buffer are dropped.
	for l.Stats().Dropped == 0 {
		l.Log(sample())
	}
	err = waittest.Returns(t, "Close with a reader that stopped", l.Close)
	if err == nil || !strings.Contains(err.Error(), "dropped") {
		t.Errorf("Close: %v, want the dropped lines told", err)
	}
	if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was renamed or replaced: %v, %v", st.Mode(), err)
	}
}

// TestDeviceIsNotRotated: a log that is a device (here /dev/null, linked
// as /dev/stdout is) is never renamed by the rotation by size; before, the
// rotation renamed the device's link and went on writing a new regular
// file in its place.
func TestDeviceIsNotRotated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stdout")
	if err := os.Symlink("/dev/null", path); err != nil {
		t.Fatal(err)
	}
	l, err := New(Options{Path: path, MaxSize: 1 << 10, MaxFiles: 2, BufferSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	logAll(l, 200)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Rotations != 0 || st.Errors != 0 {
		t.Errorf("stats %+v, want no rotation", st)
	}
	if target, err := os.Readlink(path); err != nil || target != "/dev/null" {
		t.Errorf("the link now holds %q, %v", target, err)
	}
	if _, err := os.Lstat(path + ".1"); !os.IsNotExist(err) {
		t.Errorf("a rotated file exists: %v", err)
	}
}
