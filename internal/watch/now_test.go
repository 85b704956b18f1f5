package watch

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestNowReadsAtOnce: a look asked for (Options.Now, an operator's
// reload) reads the files when asked and applies a new version at once,
// where the regular looks would wait an hour for it; the same files asked
// again apply nothing, and files that cannot be read are reported and
// leave the running version.
func TestNowReadsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		write(t, path, "v1")
		v1, err := Read([]string{path})
		if err != nil {
			t.Fatal(err)
		}
		now := make(chan struct{})
		r, stop := runWith(t, Options{Current: v1.Hash, PollOnly: true, Interval: time.Hour, Now: now,
			Files: func() ([]string, error) { return []string{path}, nil }})
		defer stop()

		time.Sleep(time.Second)
		write(t, path, "v2")
		time.Sleep(time.Second)
		now <- struct{}{}
		synctest.Wait()
		if applied, at, _ := r.get(); len(applied) != 1 || applied[0] != "v2" || at[0] != 2*time.Second {
			t.Fatalf("asked at 2s: applied %q at %v, want v2 at 2s", applied, at)
		}
		now <- struct{}{}
		synctest.Wait()
		if applied, _, _ := r.get(); len(applied) != 1 {
			t.Fatalf("asked again, unchanged: applied %q, want v2 alone", applied)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		now <- struct{}{}
		synctest.Wait()
		if applied, _, failed := r.get(); len(applied) != 1 || len(failed) != 1 {
			t.Fatalf("asked with the file gone: applied %q, failed %v; want v2 alone and one failure", applied, failed)
		}
	})
}
