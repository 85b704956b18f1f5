package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestCreateKeyPastMaxKeys: the admin API answers 409 with the reason to
// a new key past server.admin.max_keys (revoked keys count: they stay
// stored), and records nothing; the keys made before keep working and
// can still be changed. Before, it made every key asked for.
func TestCreateKeyPastMaxKeys(t *testing.T) {
	ta := newTestAPIWith(t, `server:
  admin: {max_keys: 2}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
`)
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

// TestDeleteRevokedKeyFreesItsPlace: DELETE /api/v1/keys/NAME removes a
// revoked key, which frees its place under server.admin.max_keys, and is
// audited; a key that is not revoked is refused with 409 and a reason.
func TestDeleteRevokedKeyFreesItsPlace(t *testing.T) {
	ta := newTestAPIWith(t, `server:
  admin: {max_keys: 1}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
`)
	if st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"one","plan":"basic"}`, nil); st != http.StatusCreated {
		t.Fatalf("key one: %d %s", st, msg)
	}
	if st, msg := ta.do(t, "DELETE", "/api/v1/keys/one", "", nil); st != http.StatusConflict || !strings.Contains(msg, "revoke") {
		t.Fatalf("deleting a key that is not revoked: %d %q, want 409 saying to revoke it", st, msg)
	}
	if st, msg := ta.do(t, "POST", "/api/v1/keys/one/revoke", "", nil); st != http.StatusOK {
		t.Fatalf("revoking one: %d %s", st, msg)
	}
	if st, _ := ta.do(t, "POST", "/api/v1/keys", `{"name":"two","plan":"basic"}`, nil); st != http.StatusConflict {
		t.Fatalf("a second key past max_keys 1 (the first revoked): %d, want 409", st)
	}
	if st, msg := ta.do(t, "DELETE", "/api/v1/keys/one", "", nil); st != http.StatusOK {
		t.Fatalf("deleting the revoked key: %d %s", st, msg)
	}
	if st, _ := ta.do(t, "GET", "/api/v1/keys/one", "", nil); st != http.StatusNotFound {
		t.Errorf("the deleted key: GET %d, want 404", st)
	}
	if st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"two","plan":"basic"}`, nil); st != http.StatusCreated {
		t.Errorf("a key in the place the deletion freed: %d %s", st, msg)
	}
	if st, _ := ta.do(t, "DELETE", "/api/v1/keys/nobody", "", nil); st != http.StatusNotFound {
		t.Errorf("deleting a key that never was: %d, want 404", st)
	}
	entries, err := ta.audit.List(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := false
	for _, e := range entries {
		deleted = deleted || e.Action == "key.delete" && e.Target == "one"
	}
	if !deleted {
		t.Errorf("no key.delete entry for one in the audit log: %+v", entries)
	}
}
