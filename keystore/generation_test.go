package keystore

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// TestGenerationOfAReset: a key at a generation counted 1, 2, 3 (a record
// written before resets took their time) keeps its counters (key:acme#3);
// its next reset moves it to the reset's time in Unix microseconds, and
// one under a clock set back to the generation after its own.
func TestGenerationOfAReset(t *testing.T) {
	t.Parallel()
	r := reloader(t)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ctx := context.Background()
	s, err := New(ctx, Options{Backend: NewFileBackend(filepath.Join(t.TempDir(), "keys.json")), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := s.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		what string
		gen  func(int64) int64
		want int64
	}{
		{"a record of three resets counted", func(int64) int64 { return 3 }, 3},
		{"a reset", func(g int64) int64 { return NextGeneration(g, at) }, at.UnixMicro()},
		{"a reset under a clock set back", func(g int64) int64 { return NextGeneration(g, at.Add(-time.Hour)) }, at.UnixMicro() + 1},
	} {
		rec, err := s.Update(ctx, "acme", func(r *Record) error { r.Generation = step.gen(r.Generation); return nil })
		if err != nil {
			t.Fatal(err)
		}
		want := "key:acme#" + strconv.FormatInt(step.want, 10)
		if k := lookup(s, r.Policy(), raw); rec.Generation != step.want || k == nil || k.Counter() != want {
			t.Errorf("%s: generation %d, counter %v, want %s", step.what, rec.Generation, k, want)
		}
	}
}
