package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// descriptorFile is a descriptor file of the domain dom with 20 limits,
// padded with a comment of pad bytes.
func descriptorFile(dom string, pad int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\ndomain: %s\ndescriptors:\n", strings.Repeat("x", pad), dom)
	for j := range 20 {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", j, j+1)
	}
	return b.String()
}

// fillDir writes n descriptor files, each of its own domain and padded
// with pad bytes, into the new directory dir.
func fillDir(t *testing.T, dir string, n, pad int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.yaml", i)), []byte(descriptorFile(fmt.Sprintf("d%d", i), pad)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A directory of descriptor files is bounded as a whole: more files than
// the bound, or more bytes in all, is refused with an error naming the
// directory, the count or total and the bound, whatever each file holds.
func TestLoadBoundsTheDirectory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n, pad int
		want   []string
	}{
		// 1,025 valid files of 20 descriptors: loaded whole before.
		{"files", 1025, 0, []string{"1025 descriptor files, more than the 1024 allowed"}},
		// 17 files of 1 MB, each far under the bound of one file.
		{"bytes", 17, 1 << 20, []string{"bytes in all, more than the 16777216 allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "config")
			fillDir(t, dir, tc.n, tc.pad)
			cfg, err := Load([]string{dir}, LoadOptions{})
			if err == nil {
				t.Fatalf("%d files loaded: %d domains", tc.n, len(cfg.Domains()))
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error %v is not ErrConfig", err)
			}
			for _, w := range append(tc.want, dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// Settable: a bound raised lets them load.
	dir := filepath.Join(t.TempDir(), "config")
	fillDir(t, dir, 1025, 0)
	if _, err := Load([]string{dir}, LoadOptions{MaxFiles: 2000}); err != nil {
		t.Errorf("with MaxFiles 2000: %v", err)
	}
	if _, err := Load([]string{dir}, LoadOptions{MaxFiles: 1000}); err == nil || !strings.Contains(err.Error(), "more than the 1000 allowed") {
		t.Errorf("with MaxFiles 1000: %v", err)
	}
}

// A reload to a directory over the bounds is refused and logged, and the
// running configuration stays.
func TestWatchRefusesADirectoryOverTheBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n, pad int
		want   string
	}{
		{"files", 1100, 0, "1100 descriptor files, more than the 1024 allowed"},
		{"bytes", 17, 1 << 20, "more than the 16777216 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "config")
			fillDir(t, dir, 1, 0)
			cfg, err := Load([]string{dir}, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			svc := New(nil, cfg, Options{})
			out := &syncBuffer{}
			results := make(chan error, 100)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				Watch(ctx, svc, []string{dir}, WatchOptions{Interval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(out, nil)),
					OnReload: func(err error) { results <- err }})
				close(done)
			}()
			defer func() { cancel(); <-done }()

			// The new version is written beside the directory, then
			// moved in place: the watch never sees a part of it.
			next := filepath.Join(root, "next")
			fillDir(t, next, tc.n, tc.pad)
			if err := os.Rename(dir, filepath.Join(root, "old")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(next, dir); err != nil {
				t.Fatal(err)
			}
			deadline := time.After(30 * time.Second)
			for refused := false; !refused; {
				select {
				case err := <-results:
					if err == nil {
						t.Fatalf("a directory over the bounds loaded: %d domains", len(svc.Config().Domains()))
					}
					refused = strings.Contains(err.Error(), tc.want)
				case <-deadline:
					t.Fatal("the new directory was not refused")
				}
			}
			if got := svc.Config().Domains(); len(got) != 1 || got[0] != "d0" {
				t.Errorf("running domains %v, want [d0]", got)
			}
			if logged := out.String(); !strings.Contains(logged, "the running one stays") || !strings.Contains(logged, tc.want) ||
				!strings.Contains(logged, dir) {
				t.Errorf("log:\n%s\nwant the refusal naming %s and %q", logged, dir, tc.want)
			}
		})
	}
}
