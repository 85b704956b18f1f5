package policy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/internal/watch"
)

// rateOf returns the rate of limit "a" in p.
func rateOf(t *testing.T, p *Policy) int64 {
	t.Helper()
	l, ok := p.Limit("a")
	if !ok {
		t.Fatal("no limit a")
	}
	return l.Rule.Limit().Rate
}

// rate100 writes a policy file whose limit "a" has rate 100 and returns
// its path and a Reloader of it that looks every second (no wake-ups, for
// synctest's clock), each policy it applies sent on applied.
func rate100(t *testing.T) (path string, rl *Reloader, applied chan *Policy) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, "limits:\n  - {name: a, rate: 100, key: global}\n")
	applied = make(chan *Policy, 8)
	rl, err := NewReloader(ReloaderOptions{Path: path, Interval: time.Second, NoWake: true,
		OnReload: func(p *Policy) { applied <- p }})
	if err != nil {
		t.Fatal(err)
	}
	return path, rl, applied
}

// TestRunNeverAppliesAHalfWrittenFile writes "rate: 1500" in two halves
// with a pause in between, while Run polls every second: the first half
// ("rate: 1") is a valid file and a look falls in the pause, but it is
// never applied, because the next look sees the file changed again.
func TestRunNeverAppliesAHalfWrittenFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "floodgate.yaml")
		writeFile(t, path, "limits:\n  - {name: a, rate: 100, key: global}\n")
		applied := make(chan *Policy, 8)
		var logs syncBuffer
		rl, err := NewReloader(ReloaderOptions{Path: path, Interval: time.Second, NoWake: true,
			Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
			OnReload: func(p *Policy) { applied <- p }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { rl.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		// Looks at 0s, 1s, 2s ...; the file is half written from 0.7s
		// to 1.3s, so the look at 1s reads "rate: 1".
		full := "limits:\n  - name: a\n    key: global\n    rate: 1500\n"
		half := strings.TrimSuffix(full, "500\n")
		time.Sleep(700 * time.Millisecond)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(half); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		if _, err := f.WriteString(full[len(half):]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		p := <-applied
		if got := rateOf(t, p); got != 1500 {
			t.Fatalf("applied rate %d, want 1500: a half-written file was applied", got)
		}
		if rl.Policy() != p || rl.Reloads() != 1 || rl.Rejected() != 0 {
			t.Errorf("reloads %d, rejected %d", rl.Reloads(), rl.Rejected())
		}
		// The log names the version applied by its hash.
		sum := watchShort(t, path)
		if !strings.Contains(logs.String(), "sha256="+sum) {
			t.Errorf("log does not name version %s:\n%s", sum, logs.String())
		}
	})
}

// TestRunAppliesARenamedFileAtTheNextStableLook replaces the file by a
// rename, as configuration tools and Kubernetes do: the new version is
// applied by the look that confirms it, at most two intervals later.
func TestRunAppliesARenamedFileAtTheNextStableLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path, rl, applied := rate100(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { rl.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		time.Sleep(2500 * time.Millisecond)
		start := time.Now()
		writeFile(t, path, "limits:\n  - {name: a, rate: 7, key: global}\n")
		p := <-applied
		if got := rateOf(t, p); got != 7 {
			t.Fatalf("applied rate %d", got)
		}
		// Seen at 3s, confirmed at 4s.
		if waited := time.Since(start); waited > 2*time.Second {
			t.Errorf("applied %v after the rename, want at most two intervals", waited)
		}
		// Nothing else happens while the file stays the same.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if len(applied) != 0 || rl.Reloads() != 1 {
			t.Errorf("reloads %d, want 1", rl.Reloads())
		}
	})
}

// TestReloadIsImmediate: Reload (SIGHUP) does not wait for the file to be
// stable.
func TestReloadIsImmediate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, "limits:\n  - {name: a, rate: 100, key: global}\n")
	var logs syncBuffer
	rl, err := NewReloader(ReloaderOptions{Path: path, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, "limits:\n  - {name: a, rate: 3, key: global}\n")
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := rateOf(t, rl.Policy()); got != 3 {
		t.Errorf("rate %d after Reload, want 3", got)
	}
	if sum := watchShort(t, path); !strings.Contains(logs.String(), "sha256="+sum) {
		t.Errorf("log does not name version %s:\n%s", sum, logs.String())
	}
}

// watchShort is the short hash by which logs name the version of the file
// at path (a file with no key file).
func watchShort(t *testing.T, path string) string {
	t.Helper()
	v, err := watch.Read([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	return v.Short()
}

// TestStartFollowsTheFileBeforeItReturns: a file that a deploy script
// starts writing the moment Start returns (floodgate serve says it
// serves after it), and whose writer stalls with half of it, is not
// applied while the writer holds it open; the whole file is, once it is
// closed. With go Run(ctx) in its place, the first look may come after
// the write began and the half ("rate: 1") would be applied two looks
// later.
func TestStartFollowsTheFileBeforeItReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path, rl, applied := rate100(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer func() { cancel(); synctest.Wait() }()
		rl.Start(ctx)

		full := "limits:\n  - name: a\n    key: global\n    rate: 1500\n"
		half := strings.TrimSuffix(full, "500\n")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(half); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if rl.Reloads() != 0 || rl.Rejected() != 0 || rateOf(t, rl.Policy()) != 100 {
			t.Fatalf("while the writer holds the file: reloads %d, rejected %d, rate %d; want the running policy",
				rl.Reloads(), rl.Rejected(), rateOf(t, rl.Policy()))
		}
		if _, err := f.WriteString(full[len(half):]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if got := rateOf(t, <-applied); got != 1500 {
			t.Fatalf("applied rate %d, want 1500", got)
		}
	})
}
