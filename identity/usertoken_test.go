package identity

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestBadTokenNeverTakesTheUserHeader: a request that presents a token
// which does not verify (forged, expired, malformed, padded past 8 KiB)
// has no user in Resolve either, as in Client and User (the gateway's
// way): a trusted proxy's user header never speaks for it. Only a request
// without a token takes the header's user. The requests come over
// loopback from 127.0.0.1, a trusted proxy.
func TestBadTokenNeverTakesTheUserHeader(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	r, err := NewResolver(Options{JWT: &JWTOptions{Alg: "HS256", Key: k.secret},
		TrustedProxies: prefixes(t, "127.0.0.0/8"), UserHeader: "X-User"})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct{ Resolve, Steps, Error string }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var a answer
		id := r.ResolveAt(req, k.now)
		a.Resolve = id.User
		if id.UserError != nil {
			a.Error = Reason(id.UserError)
		}
		// The gateway's steps: the client, then the token's user.
		step := r.Client(req)
		if tok := r.Token(req); tok != "" {
			step.User, _ = r.User(tok, k.now)
		}
		a.Steps = step.User
		json.NewEncoder(w).Encode(a)
	}))
	defer srv.Close()

	good := sign(t, jwt.SigningMethodHS256, k.secret, k.claims(nil), "")
	for _, tc := range []struct {
		name, token string
		want        answer
	}{
		{"no token", "", answer{"admin", "admin", ""}},
		{"valid token", good, answer{"parent-42", "parent-42", ""}},
		{"forged token", sign(t, jwt.SigningMethodHS256, []byte("forged-forged-forged-forged-forged"), k.claims(nil), ""),
			answer{"", "", ReasonSignature}},
		{"expired token", sign(t, jwt.SigningMethodHS256, k.secret, k.claims(map[string]any{"exp": k.now.Add(-time.Hour).Unix()}), ""),
			answer{"", "", ReasonExpired}},
		{"malformed token", "not.a.token", answer{"", "", ReasonMalformed}},
		{"padded token", strings.Repeat("a", 9<<10), answer{"", "", ReasonTooLong}},
	} {
		req, err := http.NewRequest("GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User", "admin")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got answer
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s with X-User: admin: Resolve gave user %q (%s), the steps %q; want %q (%s), the steps %q",
				tc.name, got.Resolve, got.Error, got.Steps, tc.want.Resolve, tc.want.Error, tc.want.Steps)
		}
	}
}
