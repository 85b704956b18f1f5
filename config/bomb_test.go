package config

import (
	"errors"
	"fmt"
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

// TestLongValuesCutInProblems: a policy file whose values are of 300 KB
// (an algorithm, a window, a key) is refused by problems naming the file,
// line and field that quote each value's first bytes and its length, not
// the whole value: before, the message held every value whole (900 KB).
func TestLongValuesCutInProblems(t *testing.T) {
	huge := strings.Repeat("x", 300_000)
	_, err := Parse("p.yaml", []byte("limits:\n  - {name: a, algorithm: "+huge+", rate: 1, per: 1s, burst: 2, key: client_ip}\n"+
		"  - {name: b, rate: 1, per: "+huge+", burst: 2, key: client_ip}\n  - {name: c, rate: 1, per: 1s, burst: 2, key: \"header:"+huge+"\"}\n"))
	msg := fmt.Sprint(err)
	for _, want := range []string{"p.yaml:2:", "limits[0].algorithm: unknown algorithm \"xxx", "p.yaml:3:", "limits[1].per: bad duration \"xxx", "p.yaml:4:", "limits[2].key: unknown key \"header:xxx", "… (300000 bytes)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("no %q in the problems (%d bytes): %.600s", want, len(msg), msg)
		}
	}
	if len(msg) > 4<<10 {
		t.Errorf("the problems of three values of 300 KB: %d bytes", len(msg))
	}
}
