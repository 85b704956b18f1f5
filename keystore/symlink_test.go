//go:build unix

package keystore

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// TestKeysFileLinkKept: a keys file that is a symbolic link (an
// operator's, a mounted volume's) is written where it leads, and stays a
// link: each write replaces the file it leads to, in that file's
// directory, mode 0600, and a store started again from the link reads the
// keys written. Before, the first write renamed a regular file over the
// link: the link was gone, the file it led to kept the keys it had, and
// whatever read that file (a backup, the volume) no longer saw a change.
func TestKeysFileLinkKept(t *testing.T) {
	r := reloader(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// link makes the link in etc to the file in data, and returns
		// the text of the link.
		link func(t *testing.T, etc, data string) string
		// exists says that the file the link leads to is there before the
		// first write.
		exists bool
	}{
		{"absolute", func(t *testing.T, etc, data string) string { return filepath.Join(data, "keys.json") }, true},
		{"relative", func(t *testing.T, etc, data string) string { return "../data/keys.json" }, true},
		{"to a file not there yet", func(t *testing.T, etc, data string) string { return "../data/keys.json" }, false},
		{"through a linked directory, as a mounted volume's", func(t *testing.T, etc, data string) string {
			// etc/..data -> ../data; etc/keys.json -> ..data/keys.json
			if err := os.Symlink("../data", filepath.Join(etc, "..data")); err != nil {
				t.Fatal(err)
			}
			return "..data/keys.json"
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			etc, data := filepath.Join(root, "etc"), filepath.Join(root, "data")
			for _, d := range []string{etc, data} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			file := filepath.Join(data, "keys.json")
			if tc.exists {
				if err := os.WriteFile(file, []byte(`{"keys":[]}`+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			link := filepath.Join(etc, "keys.json")
			to := tc.link(t, etc, data)
			if err := os.Symlink(to, link); err != nil {
				t.Fatal(err)
			}

			s, err := New(ctx, Options{Backend: NewFileBackend(link), Policy: r.Policy})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Create(ctx, "acme", "basic", policy.KeyOptions{}); err != nil {
				t.Fatal(err)
			}
			raw, _, err := s.Rotate(ctx, "acme", 0)
			if err != nil {
				t.Fatal(err)
			}

			st, err := os.Lstat(link)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("the keys file's link was replaced by a file of mode %v", st.Mode())
			}
			if got, err := os.Readlink(link); err != nil || got != to {
				t.Errorf("the link leads to %q (%v), want %q", got, err, to)
			}
			st, err = os.Lstat(file)
			if err != nil {
				t.Fatalf("the file the link leads to: %v", err)
			}
			if !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
				t.Errorf("the file the link leads to: mode %v, want a regular file 0600", st.Mode())
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var fd fileData
			if err := json.Unmarshal(b, &fd); err != nil || len(fd.Keys) != 1 || fd.Keys[0].Name != "acme" {
				t.Errorf("the file the link leads to holds %s (%v), want the key acme", b, err)
			}
			for _, d := range []string{etc, data} {
				es, err := os.ReadDir(d)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range es {
					if strings.Contains(e.Name(), ".tmp") {
						t.Errorf("a temporary file is left in %s: %s", filepath.Base(d), e.Name())
					}
				}
			}

			again, err := New(ctx, Options{Backend: NewFileBackend(link), Policy: r.Policy})
			if err != nil {
				t.Fatal(err)
			}
			if k := lookup(again, r.Policy(), raw); k == nil || k.Name() != "acme" {
				t.Errorf("a store started again from the link does not find the rotated key: %v", k)
			}
		})
	}
}
