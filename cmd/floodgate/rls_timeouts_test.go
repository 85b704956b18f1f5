package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRLSRefusesATimeoutOfZero: a duration setting that bounds something
// (REDIS_TIMEOUT, REDIS_PERSECOND_TIMEOUT, FLOODGATE_STORE_TIMEOUT,
// GRPC_MAX_CONNECTION_AGE_GRACE, STATS_FLUSH_INTERVAL) given as 0 or
// negative stops floodgate rls at its start, and fails --check, with an
// error naming the variable and saying why. REDIS_TIMEOUT=0 and the
// others used to start, on a bound the operator never chose:
// REDIS_TIMEOUT's 0 became the Redis client's 1s, FLOODGATE_STORE_TIMEOUT's
// 0 the engine's 250ms and a negative one no deadline at all, and a grace
// of 0 was 10s. envoyproxy/ratelimit reads REDIS_TIMEOUT=0 as no timeout,
// which Floodgate refuses: every call to Redis keeps a bound. The same
// settings, positive, start on the same Redis.
func TestRLSRefusesATimeoutOfZero(t *testing.T) {
	main := redistest.Start(t)
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"})
	envWith := func(extra map[string]string) []string {
		m := rlsEnvFor(dir, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr, "REDIS_PERSECOND": "true",
			"REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": main.Addr})
		for k, v := range extra {
			m[k] = v
		}
		_, env := envOf(m)
		return env
	}
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	// start runs floodgate rls and reports whether it started, or its
	// standard error when it ended first.
	start := func(env []string) (started bool, stderr string) {
		_, done, errOut, found := rlsCommand(t, env, `^floodgate rls: gRPC .* on (\S+)$`)
		select {
		case <-found:
			return true, ""
		case err := <-done:
			done <- err
			if err == nil {
				t.Errorf("floodgate rls ended without an error:\n%s", errOut.String())
			}
			return false, errOut.String()
		case <-time.After(30 * time.Second):
			t.Fatalf("floodgate rls neither started nor ended:\n%s", errOut.String())
		}
		return false, ""
	}

	positive := map[string]string{"REDIS_TIMEOUT": "2s", "REDIS_PERSECOND_TIMEOUT": "2s", "FLOODGATE_STORE_TIMEOUT": "10s",
		"GRPC_MAX_CONNECTION_AGE_GRACE": "30s", "STATS_FLUSH_INTERVAL": "5s"}
	if ok, stderr := start(envWith(positive)); !ok {
		t.Fatalf("floodgate rls did not start with positive durations:\n%s", stderr)
	}
	for variable := range positive {
		for _, v := range []string{"0", "0s", "-1s"} {
			t.Run(variable+"="+v, func(t *testing.T) {
				env := envWith(map[string]string{variable: v})
				want := "rls: " + variable + "=\"" + v + "\": want a positive duration"
				check := exec.Command(bin, "rls", "--check")
				check.Env = append(env, runMainEnv+"=1", "PATH="+os.Getenv("PATH"))
				if out, err := check.CombinedOutput(); err == nil || !strings.Contains(string(out), want) {
					t.Errorf("floodgate rls --check: %v\n%s\nwant %q", err, out, want)
				}
				started, stderr := start(env)
				if started {
					t.Fatalf("floodgate rls started with %s=%s", variable, v)
				}
				if !strings.Contains(stderr, want) {
					t.Errorf("floodgate rls ended at its start without saying why:\n%s\nwant %q", stderr, want)
				}
			})
		}
	}
}
