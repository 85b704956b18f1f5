package admin

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestAuditFailureCounted: a change whose audit entry cannot be written
// (the audit file's place taken by a directory, as a full or read-only
// disk fails it) is made all the same (a revocation a full disk undid
// would be worse) and counted in floodgate_admin_audit_failures_total,
// for an alert; before, only the process log said so.
func TestAuditFailureCounted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(path, []byte("version: 1\nplans:\n  - {name: basic, rate: 10, per: 1s, burst: 10}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := keystore.New(context.Background(), keystore.Options{Backend: keystore.NewFileBackend(filepath.Join(dir, "keys.json")),
		Policy: rl.Policy})
	if err != nil {
		t.Fatal(err)
	}
	rl.SetKeySource(keys)
	st, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	auditPath := filepath.Join(dir, "audit.jsonl")
	if err := os.Mkdir(auditPath, 0o700); err != nil { // no file can be written there
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("t"))}}, Keys: keys,
		Audit: NewFileAudit(auditPath, 0), Policy: rl.Policy, Engine: limiter.New(st, limiter.Options{}), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/keys", strings.NewReader(`{"name":"acme","plan":"basic"}`))
	req.Header.Set("Authorization", "Bearer t")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("create with the audit log unwritable: %d, want the key made", resp.StatusCode)
	}
	if _, err := keys.Get("acme"); err != nil {
		t.Fatalf("the key was not made: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "floodgate_admin_audit_failures_total" && len(mf.GetMetric()) == 1 {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got != 1 {
		t.Errorf("floodgate_admin_audit_failures_total %v after one change not audited, want 1 (-1: not registered)", got)
	}
}
