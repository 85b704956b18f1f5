//go:build unix

package memstore_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestStateFileLinkKept: a state file that is a symbolic link (to a
// volume mounted elsewhere) stays a link across snapshots, the file it
// leads to holds the state, and a store started again from the link
// restores it.
func TestStateFileLinkKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "volume")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(data, "state")
	path := filepath.Join(dir, "state")
	if err := os.Symlink("volume/state", path); err != nil {
		t.Fatal(err)
	}
	c := &clock{ns: time.Now().UnixNano()}
	w := windowRule(t, 100)
	s, err := memstore.New(memstore.Options{StatePath: path, Now: c.now, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	charge(t, s, limiter.Hit{Rule: w, Key: "k", Cost: 7})
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	charge(t, s, limiter.Hit{Rule: w, Key: "k", Cost: 3})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("state path is %v after two snapshots, want the link kept", st.Mode())
	}
	if st, err := os.Stat(target); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		t.Fatalf("link target: %v %v, want the state written there", st, err)
	}
	if left, _ := filepath.Glob(filepath.Join(data, "*.tmp*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	s2 := newStore(t, memstore.Options{StatePath: path, Now: c.now, SnapshotInterval: -1})
	if got := used(t, s2, w, "k"); got != 10 {
		t.Fatalf("restored through the link: %d used, want 10", got)
	}
}
