package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/lograte"
)

// TestServeLogHoldsBackAFloodOfUpstreamErrors: a client that sends 300
// requests to a route whose upstream is down causes a warning each; the
// log takes ten of them a second, and the last one held back, written at
// the second's end, says how many others it held back (as would the next
// line to pass), so every failure is accounted for.
func TestServeLogHoldsBackAFloodOfUpstreamErrors(t *testing.T) {
	forEngines(t, testServeLogHoldsBackAFlood)
}

func testServeLogHoldsBackAFlood(t *testing.T, engine string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there: each request's upstream refuses it
	cfg := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(cfg, []byte(`version: 1
routes:
  - {name: r, match: {paths: ["/**"]}, upstream: "http://`+down+`"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, stop, _, logs := startServeLogged(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	const flood = 300
	start := time.Now()
	for range flood {
		if code, _, _ := get(t, gw+"/x"); code != 502 {
			t.Fatalf("status %d, want 502", code)
		}
	}
	elapsed := time.Since(start)
	time.Sleep(1100 * time.Millisecond)
	get(t, gw+"/x") // its line says how many were held back
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	lines, held, err := lograte.Count(logs.String(), `msg="gateway: upstream error"`)
	if err != nil {
		t.Fatal(err)
	}
	most := 10 * (int(elapsed/time.Second) + 2)
	if lines > most || int64(lines)+held != flood+1 {
		t.Fatalf("%d lines for %d failures in %v (at most %d), saying %d held back:\n%s", lines, flood+1, elapsed, most, held, logs.String())
	}
	t.Logf("%d failures in %v: %d lines, %d held back", flood+1, elapsed, lines, held)
}
