package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// benchJSON runs floodgate bench with --json and decodes its one object,
// insisting on exactly the documented fields.
func benchJSON(t *testing.T, args ...string) map[string]float64 {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), append([]string{"bench", "--json"}, args...), &stdout, &stderr); err != nil {
		t.Fatalf("bench %v: %v\n%s", args, err, stderr.String())
	}
	var got map[string]float64
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("bench output %q: %v", stdout.String(), err)
	}
	want := []string{"decisions_per_sec", "allowed", "denied", "degraded", "errors", "p50_us", "p99_us", "p999_us", "max_us",
		"redis_calls_per_decision", "redis_cpu_us_per_decision", "slow_calls", "hard_timeouts", "store_failures", "late_deadlines", "breaker_opens"}
	if len(got) != len(want) {
		t.Fatalf("bench output %q: want exactly the fields %v", stdout.String(), want)
	}
	for _, k := range want {
		if _, ok := got[k]; !ok {
			t.Fatalf("bench output %q: no %q", stdout.String(), k)
		}
	}
	return got
}

func TestBenchMemory(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"token_bucket", "sliding_log", "concurrency", "quota", "leaky_queue"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			// A limit of 5 a second per key on 10 keys: both answers show up.
			args := []string{"--store", "memory", "--algorithm", alg, "--keys", "10", "--concurrency", "4",
				"--duration", "300ms"}
			switch alg {
			case "token_bucket", "leaky_queue":
				args = append(args, "--rate", "5", "--burst", "5")
			case "concurrency":
				// More workers than slots on one key.
				args = append(args, "--keys", "1", "--concurrency", "8", "--limit", "2")
			default:
				args = append(args, "--limit", "5")
			}
			got := benchJSON(t, args...)
			if got["errors"] != 0 || got["allowed"] < 1 || got["denied"] < 1 {
				t.Fatalf("%v: want allowed and denied decisions and no errors", got)
			}
			if got["decisions_per_sec"] <= 0 || got["p50_us"] <= 0 || got["p99_us"] < got["p50_us"] {
				t.Fatalf("%v: implausible rate or percentiles", got)
			}
		})
	}
}

// TestBenchRedis is not parallel: it counts the decisions a short run
// makes over the network, which the CPU-bound parallel tests would starve.
func TestBenchRedis(t *testing.T) {
	srv := redistest.Start(t)
	got := benchJSON(t, "--store", "redis://"+srv.Addr, "--keys", "10", "--concurrency", "8",
		"--duration", "500ms", "--rate", "5", "--burst", "5")
	if got["errors"] != 0 || got["allowed"] < 1 || got["denied"] < 1 {
		t.Fatalf("%v: want allowed and denied decisions and no errors", got)
	}
	// The counts are real: 10 keys with a burst of 5 allow at least 50.
	if got["allowed"] < 50 {
		t.Fatalf("%v: fewer allowed than the bursts hold", got)
	}
}

// TestBenchRedisDown is not parallel: the port of the server it stops must
// not be taken by another test's server while it runs.
func TestBenchRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := run(context.Background(), []string{"bench", "--store", "redis://" + addr, "--duration", "300ms", "--timeout", "50ms"}, &stdout, &stderr)
	// Either the connection is refused up front or every decision fails;
	// either way it ends by itself and says so.
	if err == nil && !strings.Contains(stdout.String(), "errors") {
		t.Fatalf("bench against a dead server: no error and output %q", stdout.String())
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("bench did not stop by itself")
	}
}

func TestBenchHumanOutput(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"bench", "--duration", "100ms", "--concurrency", "2"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"decisions/s", "p99", "allowed"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("output %q lacks %q", stdout.String(), want)
		}
	}
	if strings.Contains(stdout.String(), "\r") {
		t.Fatalf("progress line written to a non-terminal: %q", stdout.String())
	}
}

func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--keys", "0"},
		{"--concurrency", "0"},
		{"--duration", "0s"},
		{"--algorithm", "nope"},
		{"--store", "mysql://x"},
		{"--rate", "0"},
		{"--algorithm", "quota", "--period", "year"},
		{"--flush-delay", "-1ms"},
		{"--duration", "1ns"},
		{"--on-failure", "maybe"},
		{"--batch", "-1"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"bench"}, args...), &stdout, &stderr)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Fatalf("bench %v: err %v, want a usage error", args, err)
		}
	}
}
