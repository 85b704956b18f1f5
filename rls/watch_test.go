package rls

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
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
