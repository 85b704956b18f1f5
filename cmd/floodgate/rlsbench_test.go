package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/loadgen"
)

// startRLSBench runs "rls-bench MODE" in process and returns its address.
func startRLSBench(t *testing.T, args ...string) string {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"rls-bench"}, args...), pw, io.Discard); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rls-bench %s: %v", args[0], err)
		}
	})
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		t.Fatalf("rls-bench %s printed nothing", args[0])
	}
	addr, ok := strings.CutPrefix(sc.Text(), "listening ")
	if !ok {
		t.Fatalf("rls-bench %s: %q", args[0], sc.Text())
	}
	go io.Copy(io.Discard, pr)
	return addr
}

// TestRLSBenchLoadAgainstServeAndBare is not parallel: it counts the
// decisions a short run makes over the network, which the CPU-bound
// parallel tests would starve.
func TestRLSBenchLoadAgainstServeAndBare(t *testing.T) {
	for _, mode := range [][]string{{"serve", "--store", "memory"}, {"bare"}} {
		addr := startRLSBench(t, mode...)
		var out strings.Builder
		err := run(context.Background(), []string{"rls-bench", "load", "--target", addr, "--concurrency", "4",
			"--keys", "10", "--duration", "300ms", "--warmup", "50ms", "--pid", itoaPID(), "--json"}, &out, io.Discard)
		if err != nil {
			t.Fatalf("%s: load: %v", mode[0], err)
		}
		var res loadgen.RLSResult
		if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
			t.Fatalf("%s: %v: %q", mode[0], err, out.String())
		}
		if res.Decisions == 0 || res.Errors != 0 || res.OverLimit != 0 || res.PerSec <= 0 || res.P99us < res.P50us {
			t.Fatalf("%s: %+v", mode[0], res)
		}
		if len(res.MeasuredPIDs) != 1 || res.CPUSeconds < 0 {
			t.Fatalf("%s: CPU not measured: %+v", mode[0], res)
		}
	}
}

func TestRLSBenchBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"rls-bench"},
		{"rls-bench", "fly"},
		{"rls-bench", "load"},
		{"rls-bench", "load", "--target", "x", "--duration", "0s"},
		{"rls-bench", "serve", "--nope"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

// itoaPID is this process's PID: the in-process server's CPU is ours.
func itoaPID() string { return strconv.Itoa(os.Getpid()) }
