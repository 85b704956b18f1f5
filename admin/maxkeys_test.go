package admin

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/policy"
)

// TestCreateKeyPastMaxKeys: the admin API answers 409 with the reason to
// a new key past server.admin.max_keys (revoked keys count: they stay
// stored), and records nothing; the keys made before keep working and
// can still be changed. Before, it made every key asked for.
func TestCreateKeyPastMaxKeys(t *testing.T) {
	f, err := config.Parse("p.yaml", []byte(`server:
  admin: {max_keys: 2}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	dir := t.TempDir()
	keys, err := keystore.New(context.Background(), keystore.Options{Backend: keystore.NewFileBackend(filepath.Join(dir, "keys.json")), Policy: pol})
	if err != nil {
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
	ta := &testAPI{url: srv.URL, audit: audit}
	for _, name := range []string{"one", "two"} {
		if st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"`+name+`","plan":"basic"}`, nil); st != http.StatusCreated {
			t.Fatalf("key %s: %d %s", name, st, msg)
		}
	}
	if st, msg := ta.do(t, "POST", "/api/v1/keys/two/revoke", "", nil); st != http.StatusOK {
		t.Fatalf("revoking two: %d %s", st, msg)
	}
	st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"three","plan":"basic"}`, nil)
	if st != http.StatusConflict || !strings.Contains(msg, "max_keys") {
		t.Fatalf("a third key past max_keys 2 (one revoked): %d %q, want 409 naming max_keys", st, msg)
	}
	if st, _ := ta.do(t, "GET", "/api/v1/keys/three", "", nil); st != http.StatusNotFound {
		t.Errorf("the refused key: GET %d, want 404", st)
	}
	if st, msg := ta.do(t, "POST", "/api/v1/keys/one/rotate", "", nil); st != http.StatusOK {
		t.Errorf("rotating a key made before the bound: %d %s", st, msg)
	}
}
