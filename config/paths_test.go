//go:build unix

package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// pathsDir is a directory for the cases of the path checks: a writable
// directory (ok), a file (plain), a directory without write permission
// (ro), a named pipe (fifo); missing does not exist.
func pathsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"ok", "ro"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	return dir
}

// asRoot reports whether permission bits fail to stop the test: then a
// directory without write permission still takes files.
func asRoot() bool { return os.Geteuid() == 0 }

type pathCase struct {
	name string
	path string
	want string // a part of the error; "" for none
	// permission marks a case that only permission bits make fail: as
	// root it must pass.
	permission bool
}

func runPathCases(t *testing.T, check func(string) error, cases []pathCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.permission && asRoot() {
				// Permission bits do not stop root: the check must then
				// accept what its user can in fact write or read.
				c.want = ""
			}
			err := check(c.path)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s: %v, want no error", c.path, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s: %v, want an error with %q", c.path, err, c.want)
			}
		})
	}
}

// TestCheckLogFile: a log in a missing directory, at a directory, under a
// file or in a directory that takes no new files is refused, without
// creating anything; a new file in a writable directory, an existing one
// and a named pipe (not opened, so nothing waits for a reader) are
// accepted.
func TestCheckLogFile(t *testing.T) {
	t.Parallel()
	dir := pathsDir(t)
	existing := filepath.Join(dir, "ok", "old.log")
	if err := os.WriteFile(existing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	runPathCases(t, CheckLogFile, []pathCase{
		{name: "new file", path: filepath.Join(dir, "ok", "access.log")},
		{name: "existing file", path: existing},
		{name: "named pipe", path: filepath.Join(dir, "fifo")},
		{name: "missing directory", path: filepath.Join(dir, "missing", "access.log"),
			want: "cannot create " + filepath.Join(dir, "missing", "access.log") + ": the directory " + filepath.Join(dir, "missing") + " does not exist"},
		{name: "directory", path: filepath.Join(dir, "ok"), want: filepath.Join(dir, "ok") + " is a directory"},
		{name: "under a file", path: filepath.Join(dir, "plain", "access.log"), want: filepath.Join(dir, "plain") + " is not a directory"},
		{name: "unwritable directory", path: filepath.Join(dir, "ro", "access.log"), permission: true,
			want: "the directory " + filepath.Join(dir, "ro") + " does not take new files: permission denied"},
	})
	if _, err := os.Stat(filepath.Join(dir, "ok", "access.log")); !os.IsNotExist(err) {
		t.Errorf("the check created the log: %v", err)
	}
}

// TestCheckStateFile: a state file in a missing directory, at a
// directory, at a named pipe (reading it at start would wait for a
// writer) or in a directory that takes no new files is refused; a new one
// and an existing one in a writable directory are accepted.
func TestCheckStateFile(t *testing.T) {
	t.Parallel()
	dir := pathsDir(t)
	existing := filepath.Join(dir, "ok", "old.state")
	if err := os.WriteFile(existing, []byte("FGS"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "ok", "locked.state")
	if err := os.WriteFile(unreadable, []byte("FGS"), 0o000); err != nil {
		t.Fatal(err)
	}
	runPathCases(t, CheckStateFile, []pathCase{
		{name: "new file", path: filepath.Join(dir, "ok", "state.bin")},
		{name: "existing file", path: existing},
		{name: "missing directory", path: filepath.Join(dir, "missing", "state.bin"),
			want: "cannot write snapshots to " + filepath.Join(dir, "missing", "state.bin") + ": the directory " + filepath.Join(dir, "missing") + " does not exist"},
		{name: "directory", path: filepath.Join(dir, "ok"), want: filepath.Join(dir, "ok") + " is a directory"},
		{name: "named pipe", path: filepath.Join(dir, "fifo"), want: filepath.Join(dir, "fifo") + " is not a regular file"},
		{name: "unwritable directory", path: filepath.Join(dir, "ro", "state.bin"), permission: true,
			want: "the directory " + filepath.Join(dir, "ro") + " does not take new files: permission denied"},
		{name: "unreadable file", path: unreadable, permission: true, want: "cannot read " + unreadable + ": permission denied"},
	})
}

// TestReadSecret: a secret is read without the white space around it; a
// missing file, a directory, a named pipe (refused without waiting for a
// writer) and a file of white space only are refused.
func TestReadSecret(t *testing.T) {
	t.Parallel()
	dir := pathsDir(t)
	good := filepath.Join(dir, "ok", "hook.secret")
	if err := os.WriteFile(good, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	blank := filepath.Join(dir, "ok", "blank.secret")
	if err := os.WriteFile(blank, []byte(" \n\t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadSecret(good); err != nil || string(b) != "s3cret" {
		t.Errorf("ReadSecret(%s) = %q, %v; want s3cret", good, b, err)
	}
	runPathCases(t, func(p string) error { _, err := ReadSecret(p); return err }, []pathCase{
		{name: "missing", path: filepath.Join(dir, "ok", "none.secret"), want: "cannot read the secret: open " + filepath.Join(dir, "ok", "none.secret") + ": no such file"},
		{name: "blank", path: blank, want: blank + " is empty"},
		{name: "directory", path: filepath.Join(dir, "ok"), want: "not a regular file (a directory)"},
		{name: "named pipe", path: filepath.Join(dir, "fifo"), want: "not a regular file (a named pipe)"},
	})
}
