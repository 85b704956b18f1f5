package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestOverloadRefusedAndUnroutedTakeNoPlace: overload control applies to
// requests that reach an upstream, and to no other. With a route's cap
// and queue both full, requests the gateway answers itself are answered
// at once with their own status, never shed, and leave the cap and the
// queue as they were: unknown and missing API keys on a route that
// requires one (403), forged and expired tokens on a route with per-user
// limits (401). On the reverse proxy a route with `upstream: none` is
// answered 404 by many clients at once, and its overload control never
// takes a place for them: none is shed, and it has held nothing.
func TestOverloadRefusedAndUnroutedTakeNoPlace(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		k := newTokenKit(t)
		u := newHolding()
		up := httptest.NewServer(u)
		t.Cleanup(up.Close)
		const block = `
    overload:
      limit: 1
      tiers: [{name: default}]
      queue: {size: 1, per_tenant: 1, max_wait: 30s}`
		src := fmt.Sprintf(`
server:
  api_key_header: x-api-key
  user:
    jwt: {alg: RS256, key_file: %q}
plans:
  - {name: gold, rate: 1000000, burst: 1000000}
keys:
  - {name: acme, plan: gold, sha256: "6371cb7a907cc8f10740229732c4b6164b285169494b85304468313513427878"}
routes:
  - name: keyed
    match: {paths: ["/keyed/**"]}
    upstream: %[2]s
    api_key_required: true%[3]s
  - name: me
    match: {paths: ["/me/**"]}
    upstream: %[2]s%[3]s
  - name: nowhere
    match: {paths: ["/nowhere/**"]}
    upstream: none
    overload: {limit: 1, tiers: [{name: default}]}
limits:
  - {name: per-user, rate: 1000000, burst: 1000000, key: user, match: {routes: [me]}}
`, k.pemPath, up.URL, block)
		pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "noplace.yaml", src)), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obs := &shedReasons{}
		g, err := New(Options{Matcher: pm, Engine: memEngine(t), Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		base := serveFront(t, front, g, u.ServeHTTP)
		c := newClient(t)
		c.Timeout = 10 * time.Second // a request that waited for a place would wait 30 s
		var wg sync.WaitGroup
		released := false
		release := func() {
			if !released {
				released = true
				close(u.release)
			}
			wg.Wait()
		}
		t.Cleanup(release)
		stat := func(route string) (s OverloadStat, ok bool) {
			g.OverloadStats(func(o OverloadStat) {
				if o.Route == route {
					s, ok = o, true
				}
			})
			return s, ok
		}
		// fill holds one request of route in flight and has one wait.
		fill := func(route, path string, hdr ...string) {
			for i, want := range []OverloadStat{{Inflight: 1}, {Inflight: 1, Queued: 1}} {
				wg.Go(func() {
					if a, err := get(c, t.Context(), base+path, hdr...); err != nil || a.status != http.StatusOK {
						t.Errorf("%s %d: %d %v", route, i, a.status, err)
					}
				})
				pollUntil(t, fmt.Sprintf("%s: %d in flight, %d queued", route, want.Inflight, want.Queued), func() bool {
					s, _ := stat(route)
					return s.Inflight == want.Inflight && s.Queued == want.Queued
				})
			}
		}
		refused := func(route, path, what string, want int, hdr ...string) {
			t.Helper()
			a, err := get(c, t.Context(), base+path, hdr...)
			if err != nil || a.status != want {
				t.Errorf("%s, %s: %d %v, want %d at once", route, what, a.status, err, want)
			}
			if s, _ := stat(route); s.Inflight != 1 || s.Queued != 1 {
				t.Errorf("%s, %s: %d in flight, %d queued after it, want 1 and 1", route, what, s.Inflight, s.Queued)
			}
		}

		fill("keyed", "/keyed/x", "x-api-key", "key-acme")
		for i := range 3 {
			refused("keyed", "/keyed/x", "a made-up key", http.StatusForbidden, "x-api-key", fmt.Sprintf("made-up-%d", i))
		}
		refused("keyed", "/keyed/x", "no key", http.StatusForbidden)

		token := func(key any, exp time.Duration) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(exp).Unix()}).SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			return "Bearer " + s
		}
		fill("me", "/me/x", "Authorization", token(k.key, time.Hour))
		refused("me", "/me/x", "a forged token", http.StatusUnauthorized, "Authorization", token(k.forger, time.Hour))
		refused("me", "/me/x", "an expired token", http.StatusUnauthorized, "Authorization", token(k.key, -time.Hour))
		refused("me", "/me/x", "a malformed token", http.StatusUnauthorized, "Authorization", "Bearer not.a.token")

		if front != frontMiddleware { // the middleware's routes all reach its next handler
			var nw sync.WaitGroup
			for i := range 32 {
				nw.Go(func() {
					if a, err := get(c, t.Context(), base+"/nowhere/x"); err != nil || a.status != http.StatusNotFound {
						t.Errorf("upstream none %d: %d %v, want 404", i, a.status, err)
					}
				})
			}
			nw.Wait()
			if s, ok := stat("nowhere"); ok {
				t.Errorf("the route without an upstream has overload control in use: %+v", s)
			}
		}
		if n := obs.get(ShedFull) + obs.get(ShedQueueFull) + obs.get(ShedTenantFull); n != 0 {
			t.Errorf("%d requests shed, want none: every refused request took a place", n)
		}
		release()
		if n := u.served.Load(); n != 4 {
			t.Errorf("the upstream served %d requests, want the 4 that filled the caps and queues", n)
		}
	})
}
