package admin

import (
	"context"
	"crypto/sha256"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/policy"
)

// TestOvertakenUpdateAuditsWhatItChanged: a change another instance
// overtakes is made again on the newer record (package keystore); its
// audit entry says what this call changed on that record, not what the
// first attempt would have changed. Two stores share one key file; the
// second one moves acme to gold while the API's call, which asks for gold
// and a rate of 5, is about to write.
func TestOvertakenUpdateAuditsWhatItChanged(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("p.yaml", []byte(`routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
  - {name: gold, rate: 10, per: 1h, burst: 30}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	ctx := context.Background()
	dir := t.TempDir()
	backend := keystore.NewFileBackend(filepath.Join(dir, "keys.json"))
	other, err := keystore.New(ctx, keystore.Options{Backend: backend, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	// The API's store: when the call's record is stamped, the other
	// instance writes first, once.
	var armed atomic.Bool
	var once sync.Once
	now := func() time.Time {
		if armed.Load() {
			once.Do(func() {
				if _, err := other.Update(ctx, "acme", func(r *keystore.Record) error { r.Plan = "gold"; return nil }); err != nil {
					t.Errorf("the other instance's change: %v", err)
				}
			})
		}
		return time.Now()
	}
	keys, err := keystore.New(ctx, keystore.Options{Backend: backend, Policy: pol, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.Create(ctx, "acme", "basic", policy.KeyOptions{}); err != nil {
		t.Fatal(err)
	}
	audit := NewFileAudit(filepath.Join(dir, "audit.jsonl"), 0)
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("ops-token"))}}, Keys: keys,
		Audit: audit, Policy: pol, Engine: noEngine{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	ta := &testAPI{url: srv.URL}

	armed.Store(true)
	if st, msg := ta.do(t, "PATCH", "/api/v1/keys/acme", `{"plan":"gold","rate":5}`, nil); st != 200 {
		t.Fatalf("PATCH: %d %s", st, msg)
	}
	rec, err := keys.Get("acme")
	if err != nil || rec.Plan != "gold" || rec.Rate != 5 {
		t.Fatalf("the key: %+v, %v", rec, err)
	}
	entries, err := audit.List(ctx, Query{Action: "key.update"})
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries %+v, %v", entries, err)
	}
	if d := entries[0].Detail; len(d) != 1 || d["rate"] == nil {
		t.Errorf("the call changed the rate only (the other instance the plan), audited as %v", d)
	}
}
