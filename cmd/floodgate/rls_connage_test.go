package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRLSRefusesAConnectionAgeItCannotServe: GRPC_MAX_CONNECTION_AGE
// negative, or too short for gRPC's ±10% jitter (under 10ns), is a
// setting floodgate rls cannot serve with. It must be refused at the
// start, naming the variable (as --check must); it must never pass the
// start and then end the process with a panic at the first gRPC
// connection, as it did.
func TestRLSRefusesAConnectionAgeItCannotServe(t *testing.T) {
	for _, age := range []string{"-1s", "5ns"} {
		t.Run(age, func(t *testing.T) {
			dir := t.TempDir()
			writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"})
			_, env := envOf(rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "GRPC_MAX_CONNECTION_AGE": age}))
			bin, err := os.Executable() // this test binary, which runs main (TestMain)
			if err != nil {
				t.Fatal(err)
			}
			check := exec.Command(bin, "rls", "--check")
			check.Env = append(env, runMainEnv+"=1", "PATH="+os.Getenv("PATH"))
			checkOut, checkErr := check.CombinedOutput()

			_, done, stderr, found := rlsCommand(t, env, `^floodgate rls: gRPC .* on (\S+)$`)
			var addr string
			select {
			case addr = <-found:
			case err := <-done:
				done <- err
				// Refused at the start: it must say why, and so must --check.
				if !strings.Contains(stderr.String(), "GRPC_MAX_CONNECTION_AGE") {
					t.Fatalf("floodgate rls ended at its start (%v) without naming GRPC_MAX_CONNECTION_AGE:\n%s", err, stderr.String())
				}
				if checkErr == nil || !strings.Contains(string(checkOut), "GRPC_MAX_CONNECTION_AGE") {
					t.Fatalf("floodgate rls --check passed (%v) what the start refuses:\n%s", checkErr, checkOut)
				}
				return
			case <-time.After(30 * time.Second):
				t.Fatalf("floodgate rls did not start:\n%s", stderr.String())
			}

			// It started: then it must serve a call and outlive it.
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, callErr := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
				Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
			select {
			case err := <-done:
				done <- err
				t.Fatalf("GRPC_MAX_CONNECTION_AGE=%s passed the start (--check: %v), then floodgate rls ended at the first gRPC connection: %v (call: %v)\n%s",
					age, checkErr, err, callErr, firstLines(stderr.String(), 4))
			case <-time.After(500 * time.Millisecond):
			}
			if callErr != nil {
				t.Errorf("the call failed: %v", callErr)
			}
		})
	}
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
