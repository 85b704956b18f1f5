package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestWokenLookAppliesAtOnce: with an hour between regular looks, a file
// renamed into place, then one written in place and closed, are applied
// within milliseconds (the file system's events wake Run); a file still
// open for writing is not.
func TestWokenLookAppliesAtOnce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event rule needs inotify")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(path, []byte("v0"), 0o644); err != nil {
		t.Fatal(err)
	}
	applied := make(chan string, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Options{Interval: time.Hour, Files: func() ([]string, error) { return []string{path}, nil },
			Apply: func(v *Version) { applied <- string(v.Files[0].Data) }})
	}()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond) // the first look, which watches the directory
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-applied:
			if got != want {
				t.Fatalf("applied %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not applied within 5s", want)
		}
	}
	start := time.Now()
	if err := os.WriteFile(path+".tmp", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	expect("v1")
	t.Logf("renamed into place: applied after %v", time.Since(start))

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("v2 half"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-applied:
		t.Fatalf("applied %q while its writer had it open", got)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := f.WriteString(", then whole"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	expect("v2 half, then whole")
	t.Logf("closed after writing: applied after %v", time.Since(start))
}

// TestConfigMapUpdateAppliesAtOnce: a file of a mounted Kubernetes
// ConfigMap, updated as the kubelet updates it (the new version written
// into a new directory, the ..data link swapped to it by a rename, then
// the old directory removed), is applied by the look its events wake, with
// an hour between regular looks: the removal of the directory the file
// led to before the swap, which no path leads to any more, loses nothing.
func TestConfigMapUpdateAppliesAtOnce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event rule needs inotify")
	}
	dir := t.TempDir()
	n := 0
	// update writes data as the kubelet's atomic writer does.
	update := func(data string) {
		t.Helper()
		n++
		version := fmt.Sprintf("..2026_12_05_10_00_%02d.%09d", n, n)
		if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, version, "policy.yaml"), data)
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
	update("v0")
	path := filepath.Join(dir, "policy.yaml")
	if err := os.Symlink(filepath.Join("..data", "policy.yaml"), path); err != nil {
		t.Fatal(err)
	}
	applied := make(chan string, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Options{Interval: time.Hour, Files: func() ([]string, error) { return []string{path}, nil },
			Started: func() { close(started) },
			Apply:   func(v *Version) { applied <- string(v.Files[0].Data) }})
	}()
	defer func() { cancel(); <-done }()
	<-started
	for _, want := range []string{"v1", "v2", "v3"} {
		update(want)
		select {
		case got := <-applied:
			if got != want {
				t.Fatalf("applied %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ConfigMap update %q not applied within 5s (the next regular look is an hour away)", want)
		}
	}
}
