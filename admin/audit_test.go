package admin

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestFileAuditBounded: the file keeps the newest entries, at most twice
// the bound on disk, and answers queries newest first.
func TestFileAuditBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a := NewFileAudit(path, 10)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 35; i++ {
		action := "key.update"
		if i%5 == 0 {
			action = "key.rotate"
		}
		if err := a.Append(ctx, Entry{Time: t0.Add(time.Duration(i) * time.Second), Actor: "ops", Action: action, Target: fmt.Sprint("k", i%3)}); err != nil {
			t.Fatal(err)
		}
	}
	if a.lines >= 20 {
		t.Errorf("%d entries on disk, want fewer than twice the bound", a.lines)
	}
	all, err := NewFileAudit(path, 10).List(ctx, Query{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 10 || !all[0].Time.Equal(t0.Add(34*time.Second)) || !all[9].Time.Equal(t0.Add(25*time.Second)) {
		t.Fatalf("kept %d entries, newest %v, oldest %v", len(all), all[0].Time, all[len(all)-1].Time)
	}
	rot, _ := a.List(ctx, Query{Action: "key.rotate"})
	if len(rot) != 2 || rot[0].Time.Sub(t0) != 30*time.Second {
		t.Errorf("rotations %+v", rot)
	}
	since, _ := a.List(ctx, Query{Target: "k1", Since: t0.Add(30 * time.Second)})
	if len(since) != 2 {
		t.Errorf("k1 since 30s: %+v", since)
	}
}
