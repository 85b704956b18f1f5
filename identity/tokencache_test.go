package identity

import (
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestTokenFloodOfOneAccountKeepsOthersCached: one account mints 5,000
// valid tokens and sends each once, against a cache of 64: the tokens of
// the 40 other users stay cached (none of them pays a verification
// again), and the account keeps TokensPerUser of its own.
func TestTokenFloodOfOneAccountKeepsOthersCached(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	r, err := NewResolver(Options{JWT: &JWTOptions{Alg: "HS256", Key: k.secret}, TokenCacheSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	var honest []string
	for i := range 40 {
		tok := sign(t, jwt.SigningMethodHS256, k.secret, k.claims(map[string]any{"sub": fmt.Sprintf("user-%d", i)}), "")
		if _, err := r.User(tok, k.now); err != nil {
			t.Fatal(err)
		}
		honest = append(honest, tok)
	}
	var flood []string
	for i := range 5000 {
		tok := sign(t, jwt.SigningMethodHS256, k.secret, k.claims(map[string]any{"sub": "mallory", "jti": fmt.Sprint(i)}), "")
		if u, err := r.User(tok, k.now); err != nil || u != "mallory" {
			t.Fatalf("flood token %d: %q, %v", i, u, err)
		}
		flood = append(flood, tok)
	}
	lost := 0
	for _, tok := range honest {
		if _, ok := r.CachedUser(tok, k.now); !ok {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of 40 users' tokens pushed out of the cache by one account's flood", lost)
	}
	kept := 0
	for _, tok := range flood {
		if _, ok := r.CachedUser(tok, k.now); ok {
			kept++
		}
	}
	if kept != TokensPerUser {
		t.Errorf("the flooding account has %d tokens cached, want %d (its newest)", kept, TokensPerUser)
	}
	for _, tok := range flood[len(flood)-TokensPerUser:] {
		if _, ok := r.CachedUser(tok, k.now); !ok {
			t.Errorf("one of the account's newest tokens is not cached")
		}
	}
}

// TestTokenCacheDropsExpiredFirst: a full cache holding expired tokens
// drops those for new ones, never a live one: 32 tokens that expired and
// 32 that have an hour left, then 32 users arrive.
func TestTokenCacheDropsExpiredFirst(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	r, err := NewResolver(Options{JWT: &JWTOptions{Alg: "HS256", Key: k.secret}, TokenCacheSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, exp time.Time, at time.Time) string {
		tok := sign(t, jwt.SigningMethodHS256, k.secret, k.claims(map[string]any{"sub": name, "exp": exp.Unix()}), "")
		if _, err := r.User(tok, at); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	var live []string
	for i := range 32 {
		put(fmt.Sprintf("short-%d", i), k.now.Add(time.Minute), k.now)
		live = append(live, put(fmt.Sprintf("long-%d", i), k.now.Add(time.Hour), k.now))
	}
	later := k.now.Add(5 * time.Minute)
	var fresh []string
	for i := range 32 {
		fresh = append(fresh, put(fmt.Sprintf("new-%d", i), later.Add(time.Hour), later))
	}
	for name, toks := range map[string][]string{"live": live, "new": fresh} {
		lost := 0
		for _, tok := range toks {
			if _, ok := r.CachedUser(tok, later); !ok {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("%d of 32 %s tokens not cached; the 32 expired ones should have gone first", lost, name)
		}
	}
}
