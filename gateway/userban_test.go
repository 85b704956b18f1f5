package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/penalty"
	"github.com/floodgate/floodgate/policy"
)

// boxKeeper screens requests with a penalty box as the console's keeper
// does: a banned client address, API key or user is answered 429, and a
// refusal by a limit is an offence of the identities it counts per.
type boxKeeper struct{ box *penalty.Box }

func (k boxKeeper) Screen(m *Match) (int, time.Duration) {
	if _, until, banned := k.box.Banned(m.ClientKey, m.KeyID, m.User); banned {
		return http.StatusTooManyRequests, time.Until(until)
	}
	return 0, 0
}

func (k boxKeeper) Outcome(ctx context.Context, within time.Duration, m *Match, refused bool, status int) {
	var by policy.Identities
	if refused {
		by = m.RefusedBy
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
	defer cancel()
	k.box.Outcome(ctx, m.ClientKey, m.KeyID, m.User, refused, by, status)
}

// CountsStatuses: the box has a rule with count_on.
func (k boxKeeper) CountsStatuses() bool {
	for _, r := range k.box.Rules() {
		if len(r.CountOn) > 0 {
			return true
		}
	}
	return false
}

// ScreensUsers: the box has a rule keyed by user.
func (k boxKeeper) ScreensUsers() bool {
	for _, r := range k.box.Rules() {
		if r.Key == config.BanKeyUser {
			return true
		}
	}
	return false
}

// TestUserBanHoldsOnEveryRoute: a user banned by the penalty box (a rule
// keyed by user) is refused on every route, on every front: on a route
// whose limits count per user, on one whose limits do not (where no limit
// needs the token verified), and on one with no limits at all, whichever
// of the user's valid tokens it presents (a token issued after the ban,
// one this instance never verified). A token that does not verify is
// never taken for the user it names: forged and expired tokens naming the
// banned user pass where no limit counts per user, as a request without a
// user does, and the ban still costs no verification to a request without
// a token.
func TestUserBanHoldsOnEveryRoute(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testUserBanHoldsOnEveryRoute)
}

func testUserBanHoldsOnEveryRoute(t *testing.T, fr string) {
	k := newTokenKit(t)
	p := compilePolicy(t, "userban.yaml", fmt.Sprintf(`version: 1
server:
  user:
    jwt: {alg: RS256, key_file: %q}
  bans:
    - {name: abuse, key: user, after: 1, within: 1m, ban: 1m}
routes:
  - {name: me, match: {paths: ["/me"]}, upstream: http://127.0.0.1:9}
  - {name: open, match: {paths: ["/open"]}, upstream: http://127.0.0.1:9}
  - {name: bare, match: {paths: ["/bare"]}, upstream: http://127.0.0.1:9}
limits:
  - {name: per-user, match: {routes: [me]}, algorithm: fixed_window, limit: 1, window: 1h, key: user}
  - {name: per-ip, match: {routes: [me, open]}, algorithm: fixed_window, limit: 1000, window: 1h, key: client_ip}
`, k.pemPath))
	box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(box.Close)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, base, c := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t), Gatekeeper: boxKeeper{box}},
		func(http.ResponseWriter, *http.Request) {})
	sign := func(key any, m jwt.SigningMethod, claims jwt.MapClaims) string {
		t.Helper()
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Now()
	hour := now.Add(time.Hour).Unix()
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	// Alice spends her per-user limit on /me and is banned for it.
	first := sign(k.key, jwt.SigningMethodRS256, jwt.MapClaims{"sub": "alice", "exp": hour, "jti": "1"})
	if got := []int{do(t, c, "GET", base+"/me", bearer(first)).status, do(t, c, "GET", base+"/me", bearer(first)).status}; got[0] != 200 || got[1] != 429 {
		t.Fatalf("alice on /me: %v, want [200 429]", got)
	}
	pollUntil(t, "alice's ban", func() bool {
		return do(t, c, "GET", base+"/me", bearer(first)).status == http.StatusTooManyRequests &&
			func() bool { _, _, b := box.Banned("", "", "alice"); return b }()
	})

	// Tokens of hers issued after the ban, which this gateway never saw
	// (a new login, or one verified by another instance), each tried once.
	fresh := func(jti string) string {
		return sign(k.key, jwt.SigningMethodRS256, jwt.MapClaims{"sub": "alice", "exp": hour, "jti": jti})
	}
	for _, tc := range []struct {
		name, path, token string
	}{
		{"her first token on a route without per-user limits", "/open", first},
		{"her first token on a route without limits", "/bare", first},
		{"a fresh token on a route without per-user limits", "/open", fresh("2")},
		{"a fresh token on a route without limits", "/bare", fresh("3")},
		{"a fresh token on the route with per-user limits", "/me", fresh("4")},
	} {
		a := do(t, c, "GET", base+tc.path, bearer(tc.token))
		if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
			t.Errorf("banned alice, %s (%s): %d, want 429 with Retry-After until her ban ends", tc.name, tc.path, a.status)
		}
	}

	// Tokens that do not verify are no one's: never alice's ban.
	for _, tc := range []struct{ name, token string }{
		{"forged", sign(k.forger, jwt.SigningMethodRS256, jwt.MapClaims{"sub": "alice", "exp": hour})},
		{"expired", sign(k.key, jwt.SigningMethodRS256, jwt.MapClaims{"sub": "alice", "exp": now.Add(-time.Hour).Unix()})},
		{"not yet valid", sign(k.key, jwt.SigningMethodRS256, jwt.MapClaims{"sub": "alice", "exp": hour, "nbf": now.Add(30 * time.Minute).Unix()})},
		{"alg none", sign(jwt.UnsafeAllowNoneSignatureType, jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice", "exp": hour})},
	} {
		for _, path := range []string{"/open", "/bare"} {
			if a := do(t, c, "GET", base+path, bearer(tc.token)); a.status != http.StatusOK {
				t.Errorf("a %s token naming alice on %s: %d, want 200 (no user, not hers)", tc.name, path, a.status)
			}
		}
	}
	// Bob, and requests without a token, are not touched.
	bob := sign(k.key, jwt.SigningMethodRS256, jwt.MapClaims{"sub": "bob", "exp": hour})
	for _, path := range []string{"/me", "/open", "/bare"} {
		if a := do(t, c, "GET", base+path, bearer(bob)); a.status != http.StatusOK {
			t.Errorf("bob on %s: %d, want 200", path, a.status)
		}
		if a := do(t, c, "GET", base+path, nil); a.status != http.StatusOK {
			t.Errorf("no token on %s: %d, want 200", path, a.status)
		}
	}
}
