//go:build unix

package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// udsDir is a short temporary directory: a Unix socket's path must fit in
// 108 bytes, which t.TempDir's may not.
func udsDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fg-uds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestRLSCommandKeepsAnotherProcessSocket: GRPC_UDS names a path that
// floodgate rls takes only when it is free or a socket nobody listens on
// (one left by a process that died). A second floodgate rls given the
// socket of one still running removed it and listened in its place, and
// when it ended, the first, alive and healthy, could no longer be reached
// (Envoy, failing open by default, then let every request through); a
// path that was a regular file (a mistyped GRPC_UDS) was deleted.
// envoyproxy/ratelimit refuses to start on a path that exists (built from
// source, commit f2fb157: "Failed to listen for gRPC", the file kept).
func TestRLSCommandKeepsAnotherProcessSocket(t *testing.T) {
	dir := udsDir(t)
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"})
	sock := filepath.Join(dir, "rls.sock")
	env := rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "GRPC_UDS": sock})
	first := startRLS(t, env)
	ask := func() error {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err
	}
	if err := ask(); err != nil {
		t.Fatalf("the first: %v", err)
	}

	run := func(env map[string]string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lookup, list := envOf(env)
		var out, errOut lockedBuffer
		done := make(chan error, 1)
		go func() { done <- rlsMain(ctx, nil, lookup, list, &out, &errOut) }()
		// One that starts is ended at once: it should not have.
		deadline := time.After(20 * time.Second)
		for {
			select {
			case err := <-done:
				return err
			case <-deadline:
				cancel()
				<-done
				return nil
			case <-time.After(20 * time.Millisecond):
				if strings.Contains(out.String(), "debug") {
					cancel()
					<-done
					return nil
				}
			}
		}
	}
	if err := run(env); err == nil || !strings.Contains(err.Error(), sock) {
		t.Errorf("a second floodgate rls on the socket of a running one: %v, want it refused, naming the socket", err)
	}
	if err := ask(); err != nil {
		t.Errorf("the first, after a second was started on its socket: %v", err)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(dir, "limits.txt")
	if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "GRPC_UDS": file})); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("GRPC_UDS naming a regular file: %v, want a refusal naming it", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("GRPC_UDS naming a regular file: it now reads %q %v, want it left as it was", b, err)
	}

	// A socket left behind by a process that died is taken, as before.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	env = rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "GRPC_UDS": stale})
	sock = stale
	p := startRLS(t, env)
	if err := ask(); err != nil {
		t.Errorf("on a stale socket: %v", err)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}
