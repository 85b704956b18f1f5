package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/app"
)

// TestReplaySetsASoftMemoryLimit: floodgate replay keeps its embedded
// stores as floodgate serve keeps its own: while it runs, the runtime's
// soft memory limit is the caps of the policies it replays through (each
// server.memory.max_bytes, the other policy's with --compare) and a tenth
// of them, plus what the rest of the process holds; when it ends, the
// limit is put back. Left to GOGC, a log of a flood of distinct clients
// took the process to twice the cap and more. The log is a named pipe,
// so that the replay is seen while it waits for the rest of it.
func TestReplaySetsASoftMemoryLimit(t *testing.T) {
	// Not parallel: the limit belongs to the whole process.
	t.Setenv("GOMEMLIMIT", "")
	const mib = 1 << 20
	policy := func(capBytes int64) string {
		return writeConfig(t, fmt.Sprintf(`version: 1
server:
  memory: {max_bytes: %d}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: per-client, algorithm: token_bucket, rate: 1, per: 1s, burst: 5}
`, capBytes))
	}
	before := debug.SetMemoryLimit(-1)
	for _, c := range []struct {
		args []string
		caps int64
	}{
		{[]string{"--config", policy(16 * mib)}, 16 * mib},
		{[]string{"--config", policy(16 * mib), "--compare", policy(32 * mib)}, 48 * mib},
	} {
		fifo := filepath.Join(t.TempDir(), "access.log")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		var out, errb bytes.Buffer
		go func() {
			done <- run(context.Background(), append([]string{"replay", "--log", fifo}, c.args...), &out, &errb)
		}()
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		line := func(i int) string {
			return fmt.Sprintf(`{"time":"2026-11-30T10:%02d:%02dZ","ip":"192.0.2.%d","method":"GET","path":"/x","status":200}`+"\n", i/60, i%60, i+1)
		}
		// More than the 4 KiB the replay reads to tell the log's format.
		for i := range 60 {
			fmt.Fprint(w, line(i))
		}
		// The replay has started once it set the limit; it then waits for
		// the rest of the log.
		limit := before
		for deadline := time.Now().Add(20 * time.Second); limit == before && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			limit = debug.SetMemoryLimit(-1)
		}
		for i := 60; i < 100; i++ {
			fmt.Fprint(w, line(i))
		}
		w.Close()
		if err := <-done; err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, errb.String())
		}
		lo := c.caps + c.caps/10 + app.SoftLimitFloor
		if limit < lo || limit > lo+64*mib {
			t.Errorf("%v: the soft memory limit while it ran was %d, want %d and what the rest of the process holds (not 64 MiB more; none is %d)",
				c.args, limit, lo, int64(math.MaxInt64))
		}
		if after := debug.SetMemoryLimit(-1); after != before {
			t.Errorf("%v: the limit after the replay is %d, want it put back to %d", c.args, after, before)
		}
		if !bytes.Contains(out.Bytes(), []byte("100 requests")) {
			t.Errorf("%v: the report:\n%s", c.args, out.String())
		}
	}
}
