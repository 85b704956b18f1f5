package admin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAuditEntryAfterATornLineReadable: an append cut short (the process
// killed mid-write, a disk full) leaves the file's last line without its
// newline. The entries the next start appends after it must each be a
// line of their own and read back; before, the next
// entry was written onto the torn line and both were skipped.
func TestAuditEntryAfterATornLineReadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	a := NewFileAudit(path, 0)
	if err := a.Append(ctx, Entry{Time: t0, Actor: "ops", Action: "key.create", Target: "acme"}); err != nil {
		t.Fatal(err)
	}
	// The next append torn after its first bytes.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"time":"2026-12-06T00:00:01Z","actor":"ops","act`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a = NewFileAudit(path, 0) // the process started again
	for i := range 2 {
		if err := a.Append(ctx, Entry{Time: t0.Add(time.Duration(2+i) * time.Second), Actor: "ops", Action: "key.revoke", Target: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := NewFileAudit(path, 0).List(ctx, Query{Target: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	revokes := 0
	for _, e := range all {
		if e.Action == "key.revoke" {
			revokes++
		}
	}
	if revokes != 2 {
		data, _ := os.ReadFile(path)
		t.Errorf("%d of the 2 revocations appended after a torn line read back (%d entries); the file:\n%s", revokes, len(all), data)
	}
}
