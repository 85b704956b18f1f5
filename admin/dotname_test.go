package admin

import (
	"net/http"
	"testing"
)

// TestKeyNamesThePathsReach: a key is managed at /api/v1/keys/NAME, and a
// URL's dot segments are removed before a request reaches a route (by
// browsers, curl and the server's own path cleaning, for %2E%2E as well),
// so a key named "." or ".." could be made but never revoked, rotated or
// disabled from the console. Such names are refused with 400 and a
// reason; names that merely hold dots are keys like any other.
func TestKeyNamesThePathsReach(t *testing.T) {
	ta := newTestAPI(t)
	for _, name := range []string{".", ".."} {
		if st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"`+name+`","plan":"basic"}`, nil); st != http.StatusBadRequest || msg == "" {
			t.Errorf("a key named %q: %d %q, want a 400 with a reason", name, st, msg)
		}
	}
	for _, name := range []string{"...", ".acme", "acme.", "a..b"} {
		if st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"`+name+`","plan":"basic"}`, nil); st != http.StatusCreated {
			t.Fatalf("a key named %q: %d %s", name, st, msg)
		}
		if st, msg := ta.do(t, "POST", "/api/v1/keys/"+name+"/revoke", "", nil); st != http.StatusOK {
			t.Errorf("revoking %q: %d %s", name, st, msg)
		}
	}
}
