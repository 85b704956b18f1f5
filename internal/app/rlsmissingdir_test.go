package app

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/waittest"
)

// TestRLSMissingRuntimeDirectory: with RUNTIME_WATCH_ROOT=false (the
// setting envoyproxy/ratelimit's README gives for Kubernetes), a runtime
// directory that does not exist stops floodgate rls at start, with an
// error naming it; with RUNTIME_WATCH_ROOT=true (the default) it starts and
// waits for the directory.
//
// envoyproxy/ratelimit, built from source (github.com/envoyproxy/ratelimit
// at f2fb157) and run on loopback on Redis with RUNTIME_ROOT naming a
// directory that does not exist (or one without RUNTIME_SUBDIRECTORY in
// it) and RUNTIME_WATCH_ROOT=false, ended at start with status 2 (`panic:
// unable to watch file (/…/rt-missing/ratelimit/config): no such file or
// directory`), so that a rollout with a wrong path stops at its first pod;
// with RUNTIME_WATCH_ROOT=true it started. floodgate rls started either
// way, answered /healthcheck 200 and every call with `no rate limit
// configuration loaded`, which Envoy, with its default failure_mode_deny:
// false, takes as a pass: the rollout went on and no limit applied.
func TestRLSMissingRuntimeDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "rt-missing")
	env := func(watchRoot string) *Envoy {
		e, err := ReadEnvoy(envOf(map[string]string{
			"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
			"RUNTIME_ROOT": missing, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": watchRoot,
			"USE_STATSD": "false", "BACKEND_TYPE": "memory", "FLOODGATE_HEAP_RESERVE_MIB": "0",
		}))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	run := func(e *Envoy) (started bool, err error) {
		lines := &lineWriter{c: make(chan string, 16)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- runRLS(ctx, e.Settings, func(string) string { return "" }, lines,
				slog.New(slog.NewTextHandler(io.Discard, nil)), rlsConns{})
		}()
		for n := 0; n < 3; {
			select {
			case <-lines.c:
				n++
			case err := <-done:
				return false, err
			case <-time.After(waittest.Wait):
				t.Fatalf("floodgate rls neither started nor returned within %v", waittest.Wait)
			}
		}
		cancel()
		return true, waittest.Returns(t, "floodgate rls stopping", func() error { return <-done })
	}

	started, err := run(env("false"))
	if started || err == nil {
		t.Errorf("RUNTIME_WATCH_ROOT=false, directory missing: started %v, err %v; want no start and an error", started, err)
	} else if want := filepath.Join(missing, "ratelimit", "config"); !strings.Contains(err.Error(), want) {
		t.Errorf("RUNTIME_WATCH_ROOT=false, directory missing: %v; want the error to name %s", err, want)
	}

	started, err = run(env("true"))
	if !started || err != nil {
		t.Errorf("RUNTIME_WATCH_ROOT=true, directory missing: started %v, err %v; want a start, waiting for the directory", started, err)
	}
}
