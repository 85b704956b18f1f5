//go:build unix

package regfile_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/internal/regfile"
)

// TestWriteAtomicFollowsLinks: a link at the path is followed where
// opening the path leads, and stays: through a chain of links, and
// through a link to ../ in a directory reached through a link, where the
// parent is the real directory's. A loop of links is refused, and leaves
// both links as they were.
func TestWriteAtomicFollowsLinks(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(to string, at ...string) string {
		p := filepath.Join(append([]string{root}, at...)...)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("srv", "deep", "conf")
	data := mk("srv", "data")
	mk("etc")
	// etc/conf -> ../srv/deep/conf, and in it keys.json -> ../../data/keys.json:
	// through etc/conf, the link's ../../ is srv's, not the root's parent.
	link("../srv/deep/conf", "etc", "conf")
	link("../../data/keys.json", "srv", "deep", "conf", "keys.json")
	// etc/chain -> etc/conf/keys.json, a link itself.
	link(filepath.Join(root, "etc", "conf", "keys.json"), "etc", "chain")
	for _, path := range []string{filepath.Join(root, "etc", "conf", "keys.json"), filepath.Join(root, "etc", "chain")} {
		want := []byte("through " + path)
		if err := regfile.WriteAtomic(path, want, 0o600); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if st, err := os.Lstat(path); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s: no longer a link: %v %v", path, st.Mode(), err)
		}
		got, err := os.ReadFile(filepath.Join(data, "keys.json"))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: the file the links lead to holds %q (%v), want %q", path, got, err, want)
		}
	}

	a := link("b", "etc", "a")
	b := link("a", "etc", "b")
	if err := regfile.WriteAtomic(a, []byte("x"), 0o600); err == nil {
		t.Error("a loop of links was written through")
	}
	for _, p := range []string{a, b} {
		if st, err := os.Lstat(p); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s: no longer a link after a refused write: %v %v", p, st.Mode(), err)
		}
	}
}
