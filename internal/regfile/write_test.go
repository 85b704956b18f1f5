//go:build unix

package regfile_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/regfile"
)

// TestWriteAtomic: the file is replaced whole, with the mode asked for,
// and nothing else is left in its directory; a write that cannot be made
// leaves the file at the path as it was and no temporary file.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := regfile.WriteAtomic(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", st.Mode(), err)
	}
	names := func() []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	if n := names(); len(n) != 1 {
		t.Errorf("the directory holds %v; want the file alone", n)
	}

	// A directory at the path: the rename fails, and the directory and
	// its content stay; no temporary file is left.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := regfile.WriteAtomic(sub, []byte("new"), 0o600); err == nil {
		t.Error("a directory was replaced")
	}
	if n := names(); len(n) != 2 {
		t.Errorf("after a failed write the directory holds %v; want the file and sub", n)
	}
	if err := regfile.WriteAtomic(filepath.Join(dir, "none", "f"), []byte("x"), 0o600); err == nil {
		t.Error("a file written in a directory that does not exist")
	}
}

// TestOneAtomicWrite: the files the process rewrites whole (the key
// store's file, the audit log when compacted) are written by WriteAtomic,
// so that each is durable the same way: a rename anywhere else in the
// module's code is one of the few that need their own (the access log's
// rotation, the memory store's snapshot, which streams and syncs itself,
// and the test certificates).
func TestOneAtomicWrite(t *testing.T) {
	root := filepath.Join("..", "..")
	allowed := map[string]bool{
		"internal/regfile/write.go":       true,
		"accesslog/logger.go":             true,
		"store/memstore/snapshot.go":      true,
		"internal/testcerts/testcerts.go": true,
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "deploy" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Contains(src, []byte("Rename(")) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Rename" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "os" && !allowed[rel] {
				t.Errorf("%s: os.Rename at %v; write a whole file with regfile.WriteAtomic", rel, fset.Position(call.Pos()))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
