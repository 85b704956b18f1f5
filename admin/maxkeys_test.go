package admin

import (
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
