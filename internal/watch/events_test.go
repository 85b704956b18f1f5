//go:build linux

package watch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// needEvents fails a test when no inotify instance can be had (the
// instance limit reached): Run would then poll alone.
func needEvents(t *testing.T) {
	t.Helper()
	n := newNotifier()
	if n == nil {
		t.Fatal("no inotify instance could be had")
	}
	n.close()
}

// fileV0 writes "v0" to a new file and returns its path and that version.
func fileV0(t *testing.T) (string, *Version) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	write(t, path, "v0")
	v0, err := Read([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	return path, v0
}

// stalledWrite writes data to path in place, in two halves: it opens the
// file (truncating it), writes the first half, waits stall, writes the
// rest and closes it.
func stalledWrite(t *testing.T, path, data string, stall time.Duration) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stall)
	if _, err := f.WriteString(data[len(data)/2:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStalledWriteNeverApplied: a writer that writes half a file, stalls
// 3 s (three looks agree on the half) and then finishes is never applied
// half: its write is in progress until it closes the file, and the
// version it closed is applied at the next look. The stability rule alone
// (PollOnly) applies the half, as the package documentation says a stall
// longer than an interval may be.
func TestStalledWriteNeverApplied(t *testing.T) {
	needEvents(t)
	const full = "limits:\n  - {name: a, rate: 1500}\n"
	for _, pollOnly := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			path, v0 := fileV0(t)
			r, stop := runWith(t, Options{Current: v0.Hash, PollOnly: pollOnly, Files: func() ([]string, error) { return []string{path}, nil }})
			defer stop()
			// Looks at 0s, 1s, 2s ...; the half stands from 0.5s to 3.5s.
			time.Sleep(500 * time.Millisecond)
			stalledWrite(t, path, full, 3*time.Second)
			time.Sleep(3 * time.Second)
			synctest.Wait()
			applied, at, _ := r.get()
			if pollOnly {
				if len(applied) != 2 || applied[0] != full[:len(full)/2] || applied[1] != full {
					t.Fatalf("polling only: applied %q at %v, want the half then the whole", applied, at)
				}
				return
			}
			if !slices.Equal(applied, []string{full}) || at[0] != 4*time.Second {
				t.Fatalf("applied %q at %v, want only the whole file, at the look after its close (4s)", applied, at)
			}
		})
	}
}

// TestClosedWriteAppliedAtTheNextLook: a file written in place and closed
// is whole, and so is one renamed into place: each is applied by the next
// look, one interval sooner than the stability rule would.
func TestClosedWriteAppliedAtTheNextLook(t *testing.T) {
	needEvents(t)
	synctest.Test(t, func(t *testing.T) {
		path, v0 := fileV0(t)
		r, stop := run(t, []string{path}, v0.Hash)
		defer stop()
		time.Sleep(1500 * time.Millisecond)
		write(t, path, "v1")
		time.Sleep(2 * time.Second)
		rename(t, path, "v2")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if applied, at, _ := r.get(); !slices.Equal(applied, []string{"v1", "v2"}) || !slices.Equal(at, []time.Duration{2 * time.Second, 4 * time.Second}) {
			t.Fatalf("applied %q at %v, want v1 at 2s and v2 at 4s", applied, at)
		}
	})
}

// TestOpenWriterHeldUntilHoldOpen: a writer that keeps the file open
// after a write holds new versions back until HoldOpen has passed since
// its last write; the stability rule then applies what the file holds.
func TestOpenWriterHeldUntilHoldOpen(t *testing.T) {
	needEvents(t)
	synctest.Test(t, func(t *testing.T) {
		path, v0 := fileV0(t)
		r, stop := runWith(t, Options{Current: v0.Hash, HoldOpen: 5 * time.Second, Files: func() ([]string, error) { return []string{path}, nil }})
		defer stop()
		time.Sleep(500 * time.Millisecond)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteString("ha")
		time.Sleep(2 * time.Second)
		f.WriteString("lf") // the last write, at 2.5s
		time.Sleep(4500 * time.Millisecond)
		synctest.Wait()
		if applied, at, _ := r.get(); len(applied) != 0 {
			t.Fatalf("applied %q at %v while the writer held the file open", applied, at)
		}
		// The look at 8s is the first past 2.5s + 5s; it agrees with the
		// one at 7s.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if applied, at, _ := r.get(); !slices.Equal(applied, []string{"half"}) || at[0] != 8*time.Second {
			t.Fatalf("applied %q at %v, want half at 8s", applied, at)
		}
	})
}

// TestNewFileHalfWrittenNotApplied: a file that joins the set (a new file
// in a directory of descriptor files) while it is being written is not
// applied until its writer closes it.
func TestNewFileHalfWrittenNotApplied(t *testing.T) {
	needEvents(t)
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "a"), "a")
		files := func() ([]string, error) {
			m, err := filepath.Glob(filepath.Join(dir, "*"))
			slices.Sort(m)
			return m, err
		}
		r, stop := runWith(t, Options{Files: files})
		defer stop()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if applied, _, _ := r.get(); len(applied) != 1 {
			t.Fatalf("applied %q, want the first version", applied)
		}
		f, err := os.Create(filepath.Join(dir, "b"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteString("half")
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if applied, at, _ := r.get(); len(applied) != 1 {
			t.Fatalf("applied %d versions (at %v) while b was being written", len(applied), at)
		}
		f.WriteString(" and the rest")
		f.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		if applied, _, _ := r.get(); len(applied) != 2 {
			t.Fatalf("applied %d versions, want b's once it was closed", len(applied))
		}
	})
}

// TestStartedFollowsTheFiles: Started is called once the files are
// followed, so a writer that opens the file as soon as it is called and
// stalls with half of it is held back like any other (a service that
// says it is ready after Started, and a deploy script that writes the
// file the moment it does). A write begun before the first look cannot
// be told from a whole file, and the stability rule applies its half
// two looks later: what Started is for.
func TestStartedFollowsTheFiles(t *testing.T) {
	needEvents(t)
	for _, wait := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			path, v0 := fileV0(t)
			started := make(chan struct{})
			var calls int
			o := Options{Current: v0.Hash, Files: func() ([]string, error) { return []string{path}, nil },
				Started: func() { calls++; close(started) }}
			var f *os.File
			open := func() {
				var err error
				if f, err = os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0); err != nil {
					t.Error(err)
					return
				}
				f.WriteString("ha")
			}
			if !wait {
				// The writer opens the file before the first look.
				open()
			}
			r, stop := runWith(t, o)
			defer stop()
			<-started
			if wait {
				open()
			}
			defer f.Close()
			time.Sleep(10 * time.Second)
			synctest.Wait()
			applied, at, _ := r.get()
			if !wait {
				if !slices.Equal(applied, []string{"ha"}) || at[0] != time.Second {
					t.Fatalf("written before the first look: applied %q at %v, want the half at 1s", applied, at)
				}
				return
			}
			if len(applied) != 0 {
				t.Fatalf("written once Started was called: applied %q at %v while the writer held the file open", applied, at)
			}
			f.WriteString("lf")
			f.Close()
			time.Sleep(time.Second)
			synctest.Wait()
			if applied, _, _ := r.get(); !slices.Equal(applied, []string{"half"}) || calls != 1 {
				t.Fatalf("after the close: applied %q, Started called %d times; want half, once", applied, calls)
			}
		})
	}
}
