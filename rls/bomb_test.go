package rls

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// parseGuarded runs parse in a goroutine and fails the test when the heap
// passes limit bytes or parsing takes past 15 s, instead of suffering the
// blow-up. It returns parse's error.
func parseGuarded(t *testing.T, limit uint64, parse func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- parse() }()
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-deadline:
			t.Fatal("parsing did not finish within 15 s")
		case <-tick.C:
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > limit {
				t.Fatalf("parsing a small file holds %d MiB of heap", m.HeapAlloc>>20)
			}
		}
	}
}

// TestDescriptorFileCannotAmplify: a descriptor file of a few hundred
// kilobytes whose descriptors are nested 4,000 levels deep (each level's
// field paths longer than the last), or whose aliases name a key of 1 MiB
// in 2,000 descriptors or 2,000 metadata mappings, is refused at its position and field, within a
// bounded heap, and never accepted.
func TestDescriptorFileCannotAmplify(t *testing.T) {
	const limit = 256 << 20
	deep := "domain: d\ndescriptors: " + strings.Repeat("[{key: k, descriptors: ", 4000) +
		"[{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]" + strings.Repeat("}]", 4000) + "\n"
	var wide strings.Builder
	wide.WriteString("domain: d\nunit: &big \"" + strings.Repeat("k", 1<<20) + "\"\ndescriptors:\n")
	for i := range 2000 {
		fmt.Fprintf(&wide, "  - {key: *big, value: v%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	var meta strings.Builder
	meta.WriteString("domain: d\nunit: &big \"" + strings.Repeat("m", 1<<20) + "\"\ndescriptors:\n")
	for i := range 2000 {
		fmt.Fprintf(&meta, "  - {key: k%d, metadata: {*big: 1}}\n", i)
	}
	for _, c := range []struct{ name, src, want string }{
		{"deep", deep, "deep.yaml:2:"},
		{"wide", wide.String(), "wide.yaml:"},
		{"metadata", meta.String(), "metadata.yaml:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GC()
			err := parseGuarded(t, limit, func() error {
				_, err := Parse(c.name+".yaml", []byte(c.src))
				return err
			})
			if err == nil || !errors.Is(err, ErrConfig) {
				t.Fatalf("a file of %d KiB accepted: %v", len(c.src)>>10, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, c.want) || !strings.Contains(msg, "descriptors[") || len(msg) > 4096 {
				t.Errorf("got %.400s", msg)
			}
			if testing.Verbose() {
				t.Logf("%.300s", err)
			}
		})
	}
}
