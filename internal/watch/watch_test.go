package watch

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder collects what Run hands over.
type recorder struct {
	mu      sync.Mutex // guards applied, at and failed
	applied []string   // the contents of the first file of each version
	at      []time.Duration
	failed  []error
	start   time.Time
}

func (r *recorder) apply(v *Version) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, string(v.Files[0].Data))
	r.at = append(r.at, time.Since(r.start))
}

// get returns what was applied and when, and the failures.
func (r *recorder) get() ([]string, []time.Duration, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.applied...), append([]time.Duration(nil), r.at...), append([]error(nil), r.failed...)
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, err)
}

// run starts Run on paths in the bubble, looking every second; the
// returned function stops it.
func run(t *testing.T, paths []string, current [32]byte) (*recorder, func()) {
	t.Helper()
	return runWith(t, Options{Current: current, Files: func() ([]string, error) { return paths, nil }})
}

// runWith starts Run with o (Interval one second unless set), its Apply
// and Fail recorded.
func runWith(t *testing.T, o Options) (*recorder, func()) {
	t.Helper()
	r := &recorder{start: time.Now()}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	o.Apply, o.Fail = r.apply, r.fail
	o.NoWake = true // the rules at the regular looks, on the bubble's clock
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		Run(ctx, o)
		close(done)
	}()
	return r, func() { cancel(); <-done }
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rename replaces path atomically.
func rename(t *testing.T, path, data string) {
	t.Helper()
	write(t, path+".tmp", data)
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestRunAppliesOnlyStableVersions holds the stability rule, which alone
// decides without the file system's events (PollOnly, systems without
// inotify): a version is applied once two consecutive looks saw it.
func TestRunAppliesOnlyStableVersions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		write(t, path, "v1")
		v1, err := Read([]string{path})
		if err != nil {
			t.Fatal(err)
		}
		r, stop := runWith(t, Options{Current: v1.Hash, PollOnly: true, Files: func() ([]string, error) { return []string{path}, nil }})
		defer stop()

		// Nothing changes: nothing is applied.
		time.Sleep(3500 * time.Millisecond)
		// A file that keeps changing at every look is never applied.
		for i := range 4 {
			write(t, path, "partial"+string(rune('a'+i)))
			time.Sleep(time.Second)
		}
		synctest.Wait()
		if applied, _, _ := r.get(); len(applied) != 0 {
			t.Fatalf("applied %q while the file was changing", applied)
		}
		// The last change was at 6.5s: the look at 7s sees it, the look
		// at 8s confirms it.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if applied, at, _ := r.get(); len(applied) != 1 || applied[0] != "partiald" || at[0] != 8*time.Second {
			t.Fatalf("applied %q at %v, want partiald at 8s", applied, at)
		}
		// A rename at 9.5s is applied at 11s; the same bytes written again
		// (a new time) are not applied again.
		rename(t, path, "v2")
		time.Sleep(3 * time.Second)
		write(t, path, "v2")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if applied, at, _ := r.get(); len(applied) != 2 || applied[1] != "v2" || at[1] != 11*time.Second {
			t.Fatalf("applied %q at %v, want v2 at 11s", applied, at)
		}
	})
}

func TestRunReportsAnUnreadableFileOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		write(t, path, "v1")
		v1, err := Read([]string{path})
		if err != nil {
			t.Fatal(err)
		}
		r, stop := run(t, []string{path}, v1.Hash)
		defer stop()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if applied, _, failed := r.get(); len(failed) != 1 || !errors.Is(failed[0], fs.ErrNotExist) || len(applied) != 0 {
			t.Fatalf("failed %v, applied %q; want one not-exist error", failed, applied)
		}
		// The same file back is the running version: nothing to apply.
		write(t, path, "v1")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if applied, _, failed := r.get(); len(applied) != 0 || len(failed) != 1 {
			t.Fatalf("failed %v, applied %q after the file came back", failed, applied)
		}
	})
}

// TestRunFollowsSymlinkSwaps updates a file the way Kubernetes updates a
// mounted ConfigMap: the file is a link into ..data, itself a link to a
// directory of the version, swapped by a rename.
func TestRunFollowsSymlinkSwaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		version := func(name, data string) {
			t.Helper()
			if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, name, "limits.yaml"), data)
			if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}
		version("..v1", "v1")
		path := filepath.Join(dir, "limits.yaml")
		if err := os.Symlink(filepath.Join("..data", "limits.yaml"), path); err != nil {
			t.Fatal(err)
		}
		r, stop := run(t, []string{path}, [32]byte{})
		defer stop()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if applied, _, _ := r.get(); len(applied) != 1 || applied[0] != "v1" {
			t.Fatalf("applied %q, want v1 (Current was zero)", applied)
		}
		version("..v2", "v2")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// The swap, at 1.5s, is a rename in the watched directory: with
		// inotify the look at 2s applies it, without the look at 3s.
		want := 2 * time.Second
		if runtime.GOOS != "linux" {
			want = 3 * time.Second
		}
		if applied, at, _ := r.get(); len(applied) != 2 || applied[1] != "v2" || at[1] != want {
			t.Fatalf("applied %q at %v, want v1 then v2 at %v", applied, at, want)
		}
	})
}

func TestHashSeparatesFiles(t *testing.T) {
	a := Hash([]File{{Path: "a", Data: []byte("bc")}})
	b := Hash([]File{{Path: "ab", Data: []byte("c")}})
	c := Hash([]File{{Path: "a", Data: []byte("b")}, {Path: "c"}})
	if a == b || a == c || b == c {
		t.Error("different sets of files hash alike")
	}
	v := &Version{Hash: a}
	if s := v.Short(); len(s) != 12 {
		t.Errorf("short hash %q", s)
	}
}
