package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/policy"
)

// TestShadowedKeyShownAndRevocable: a key made through the API whose name
// a reload then gives to a key of the policy file is refused on the
// request path (the file's wins), and the API says so: the listing shows
// it "shadowed", not "active", and it can still be revoked, so that it
// does not come back to life when the file lets the name go. The listing
// called it active and a revocation was refused with 409.
func TestShadowedKeyShownAndRevocable(t *testing.T) {
	t.Parallel()
	compile := func(src string) *policy.Policy {
		f, err := config.Parse("p.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Compile(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const base = `routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
`
	fileSum := sha256.Sum256([]byte("the-file-key-secret"))
	without := compile(base)
	with := compile(base + "keys:\n  - {name: acme, plan: basic, sha256: " + hex.EncodeToString(fileSum[:]) + "}\n")
	var cur atomic.Pointer[policy.Policy]
	cur.Store(without)
	pol := func() *policy.Policy { return cur.Load() }
	ctx := context.Background()
	keys, err := keystore.New(ctx, keystore.Options{Backend: keystore.NewFileBackend(filepath.Join(t.TempDir(), "keys.json")), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("ops-token"))}}, Keys: keys,
		Audit: NewFileAudit(filepath.Join(t.TempDir(), "audit.jsonl"), 0), Policy: pol, Engine: noEngine{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	call := func(method, path, body string) (int, []byte) {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer ops-token")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b json.RawMessage
		_ = json.NewDecoder(res.Body).Decode(&b)
		return res.StatusCode, b
	}
	var made struct{ Secret string }
	if st, b := call("POST", "/api/v1/keys", `{"name":"acme","plan":"basic"}`); st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, b)
	} else if err := json.Unmarshal(b, &made); err != nil || made.Secret == "" {
		t.Fatalf("create answered %s", b)
	}
	apiState := func() string {
		_, b := call("GET", "/api/v1/keys", "")
		var list struct {
			Keys []struct{ Name, Source, State string }
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatalf("listing %s: %v", b, err)
		}
		for _, k := range list.Keys {
			if k.Name == "acme" && k.Source == "api" {
				return k.State
			}
		}
		return ""
	}

	cur.Store(with) // a reload gives the name to a key of the file
	keys.Refresh(ctx)
	if s := apiState(); s != "shadowed" {
		t.Errorf("the API's key acme, which the file's shadows, listed %q; want shadowed", s)
	}
	if st, b := call("POST", "/api/v1/keys/acme/revoke", ""); st != http.StatusOK {
		t.Fatalf("revoking the shadowed key: %d %s; want 200", st, b)
	}

	cur.Store(without) // the file lets the name go: the key stays revoked
	keys.Refresh(ctx)
	sum := sha256.Sum256([]byte(made.Secret))
	if k := keys.LookupKey(without, &sum); k != nil {
		t.Errorf("the revoked key works again once the file let its name go: %+v", k)
	}
	if s := apiState(); s != "revoked" {
		t.Errorf("listed %q; want revoked", s)
	}
}
