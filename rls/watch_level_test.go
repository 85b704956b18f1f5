package rls

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWatchLogsARejectedFileAsAnError: a mounted ConfigMap swapped by
// Kubernetes (a new "..2026_..." directory, then the "..data" link renamed
// onto it) to a file that does not load leaves the running configuration
// in place, and says so in an error that names the file, the line and the
// field, at the error level, where envoyproxy/ratelimit logs it ("level=error
// msg=\"Error loading new configuration: limits.yaml: invalid rate limit
// unit 'fortnight'\"", run by hand with LOG_LEVEL=error). It was a warning,
// so that with LOG_LEVEL=error floodgate rls said nothing of it.
func TestWatchLogsARejectedFileAsAnError(t *testing.T) {
	dir := t.TempDir()
	swap := func(stamp, src string) {
		t.Helper()
		data := filepath.Join(dir, stamp)
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "limits.yaml"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(stamp, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "limits.yaml")); err != nil {
			if err := os.Symlink(filepath.Join("..data", "limits.yaml"), filepath.Join(dir, "limits.yaml")); err != nil {
				t.Fatal(err)
			}
		}
	}
	swap("..2026_12_06_10_00_00.1", "domain: shop\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n")
	// RUNTIME_IGNOREDOTFILES=true, as ConfigMaps are read.
	opts := LoadOptions{AllFiles: true, Recursive: true}
	cfg, err := Load([]string{dir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	svc := New(nil, cfg, Options{})
	out := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelError})) // LOG_LEVEL=error
	results := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Watch(ctx, svc, []string{dir}, WatchOptions{Interval: 10 * time.Millisecond, Load: opts, Logger: log,
			OnReload: func(err error) { results <- err }})
		close(done)
	}()
	defer func() { cancel(); <-done }()

	swap("..2026_12_06_10_05_00.2", "domain: shop\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n")
	select {
	case err := <-results:
		if err == nil {
			t.Fatal("a file with an unknown unit loaded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the swap was not seen")
	}
	if got := svc.Config().Dump(); !strings.Contains(got, "unit=MINUTE requests_per_unit=5") {
		t.Errorf("the running configuration changed: %s", got)
	}
	logged := out.String()
	want := filepath.Join(dir, "limits.yaml") + `:5:13: descriptors[0].rate_limit.unit: unknown unit \"fortnight\"`
	if !strings.Contains(logged, "level=ERROR") || !strings.Contains(logged, "the running one stays") || !strings.Contains(logged, want) {
		t.Errorf("log at LOG_LEVEL=error:\n%s\nwant an error naming %s", logged, want)
	}
}
