package accesslog

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// fullDiskEnv names the file the child process of
// TestFullDiskLeavesWholeLines logs to.
const fullDiskEnv = "FLOODGATE_TEST_FULL_DISK_LOG"

// TestFullDiskLeavesWholeLines fills the disk under the log in the middle
// of a write (a file size limit, which the kernel enforces as it does a
// full disk: part of the write, then an error), then gives the room back:
// the file must hold whole lines only, and every record logged once there
// is room again must be a line of its own. It runs in a child process, so
// that the limit touches no other test.
func TestFullDiskLeavesWholeLines(t *testing.T) {
	if path := os.Getenv(fullDiskEnv); path != "" {
		fullDiskChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "access.log")
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskLeavesWholeLines$", "-test.count=1")
	cmd.Env = append(os.Environ(), fullDiskEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	lines := readLines(t, path)
	after := 0
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d of %d is not a whole record: %q: %v", i+1, len(lines), line, err)
		}
		if p, _ := m["path"].(string); len(p) > 7 && p[:7] == "/after/" {
			after++
		}
	}
	if after != 10 {
		t.Errorf("%d of the 10 records logged after the disk had room again are in the file", after)
	}
}

// fullDiskChild logs to path under a file size limit of 3000 bytes until
// a write fails, lifts the limit, logs 10 more records and exits.
func fullDiskChild(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		fail(err)
	}
	l, err := New(Options{Path: path, BufferSize: 64 << 10, FlushInterval: 10 * time.Millisecond})
	if err != nil {
		fail(err)
	}
	full := old
	full.Cur = 3000
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		fail(err)
	}
	for i := range 100 {
		r := sample()
		r.Path = fmt.Sprintf("/before/%d", i)
		l.Log(r)
	}
	for deadline := time.Now().Add(30 * time.Second); l.Stats().Errors == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("no write failed under the limit: %+v", l.Stats()))
		}
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		fail(err)
	}
	for i := range 10 {
		r := sample()
		r.Path = fmt.Sprintf("/after/%d", i)
		l.Log(r)
	}
	if err := l.Close(); err != nil {
		fail(err)
	}
	os.Exit(0)
}

// TestRotationWithAHugeMaxFiles keeps "as many files as there may be"
// (MaxFiles at its largest, as an operator who never wants a log removed
// might write): each rotation must rename only the files there are, so
// the log keeps rotating and Close returns.
func TestRotationWithAHugeMaxFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	l, err := New(Options{Path: path, MaxSize: 4 << 10, MaxFiles: math.MaxInt, BufferSize: 1 << 10,
		FlushInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; l.Stats().Rotations < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the log did not rotate 3 times in 2 minutes: %+v", l.Stats())
		}
		r := sample()
		r.Path = fmt.Sprintf("/r/%d", i)
		l.Log(r)
		if i%8 == 7 {
			time.Sleep(time.Millisecond)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"access.log", "access.log.1", "access.log.2", "access.log.3"} {
		for _, line := range readLines(t, filepath.Join(dir, name)) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
		}
	}
}
