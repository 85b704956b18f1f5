package rls

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/internal/watch"
)

func TestWatchReloadsChangedFilesAndKeepsGoodOnes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "limits.yaml")
	// Files are replaced by renaming a complete file into place, as
	// configuration should be; distinct modification times keep coarse
	// file systems honest.
	write := func(src string, mtime time.Time) {
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(tmp, mtime, mtime)
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour)
	write("domain: one\n", base)
	cfg, err := Load([]string{dir}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := New(nil, cfg, Options{})
	results := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Watch(ctx, svc, []string{dir}, WatchOptions{Interval: 10 * time.Millisecond, OnReload: func(err error) { results <- err }})
		close(done)
	}()
	defer func() { cancel(); <-done }()
	next := func() error {
		select {
		case err := <-results:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("no reload seen")
			return nil
		}
	}

	write("domain: two\n", base.Add(time.Minute))
	if err := next(); err != nil || svc.Config().Domains()[0] != "two" {
		t.Fatalf("reload: %v, domains %v", err, svc.Config().Domains())
	}
	write("domain: [broken\n", base.Add(2*time.Minute))
	if err := next(); err == nil {
		t.Fatal("a broken file loaded")
	}
	if d := svc.Config().Domains(); len(d) != 1 || d[0] != "two" {
		t.Fatalf("after a broken file the running configuration changed: %v", d)
	}
	write("domain: three\n", base.Add(3*time.Minute))
	if err := next(); err != nil || svc.Config().Domains()[0] != "three" {
		t.Fatalf("recovery: %v, domains %v", err, svc.Config().Domains())
	}
}

// TestWatchNeverAppliesAHalfWrittenFile writes "requests_per_unit: 1500"
// in two halves with a pause in between, while Watch polls every second:
// the first half ("requests_per_unit: 1") is a valid file and a look falls
// in the pause, but only the whole file is ever applied.
func TestWatchNeverAppliesAHalfWrittenFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "limits.yaml")
		if err := os.WriteFile(file, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load([]string{dir}, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc := New(nil, cfg, Options{})
		var logs syncBuffer
		results := make(chan error, 8)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			Watch(ctx, svc, []string{dir}, WatchOptions{Interval: time.Second, NoWake: true,
				Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
				OnReload: func(err error) { results <- err }})
			close(done)
		}()
		defer func() { cancel(); <-done }()

		// Looks at 0s, 1s, 2s ...; the file is half written from 0.7s to
		// 1.3s, so the look at 1s reads "requests_per_unit: 1".
		full := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1500\n"
		half := strings.TrimSuffix(full, "500\n")
		time.Sleep(700 * time.Millisecond)
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
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
		if err := <-results; err != nil {
			t.Fatal(err)
		}
		if got := svc.Config().domains["d"].root.anyValue["k"].limit.perUnit; got != 1500 {
			t.Fatalf("applied requests_per_unit %d, want 1500: a half-written file was applied", got)
		}
		v, err := watch.Read([]string{file})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), "sha256="+v.Short()) {
			t.Errorf("log does not name version %s:\n%s", v.Short(), logs.String())
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger used from goroutines.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
