package config

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestAliasedScalarCannotAmplify: a policy file of 1.5 MiB that names one
// limit name of 256 Ki zero-width spaces (768 KiB) a thousand times
// through an alias is refused with a short message that names the file,
// line and field, within a bounded heap: each reference would otherwise
// put the whole name, quoted, into a problem of its own.
func TestAliasedScalarCannotAmplify(t *testing.T) {
	var b strings.Builder
	b.WriteString("limits:\n  - {name: &big \"" + strings.Repeat(`\u200b`, 1<<18) + "\", rate: 1, per: 1s}\n")
	for range 1000 {
		b.WriteString("  - {name: *big, rate: 1, per: 1s}\n")
	}
	runtime.GC()
	done := make(chan error, 1)
	go func() {
		_, err := Parse("big.yaml", []byte(b.String()))
		done <- err
	}()
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-deadline:
			t.Fatal("parsing did not finish within 15 s")
		case <-tick.C:
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > 256<<20 {
				t.Fatalf("parsing a file of %d KiB holds %d MiB of heap", b.Len()>>10, m.HeapAlloc>>20)
			}
		}
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %T %.300v", err, err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "big.yaml:") || !strings.Contains(msg, "limits[") || len(msg) > 64<<10 {
		t.Errorf("a message of %d bytes: %.300s", len(msg), msg)
	}
}
