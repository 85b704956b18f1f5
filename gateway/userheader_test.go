package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// userHeaderPolicy believes the user header X-User from the proxies of
// TRUSTED, and counts per user.
const userHeaderPolicy = `
server:
  trusted_proxies: [TRUSTED]
  user: {header: X-User}
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: per-user, rate: 1, per: 1h, burst: 50, key: user}
`

// TestClientsUserHeaderNeverReachesTheUpstream: the gateway believes the
// user header only from a trusted proxy; a copy sent by any other peer is
// removed before the request is passed on, so that an upstream that reads
// the user its proxy names is never told one the client chose while the
// gateway charged the request to no user. From a trusted proxy it goes on.
func TestClientsUserHeaderNeverReachesTheUpstream(t *testing.T) {
	for _, tc := range []struct {
		name, trusted string
		kept          bool
	}{
		{"untrusted peer", "10.0.0.0/8", false},
		{"trusted proxy", "127.0.0.0/8", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forFronts(t, allFronts, func(t *testing.T, front string) {
				src := strings.ReplaceAll(userHeaderPolicy, "TRUSTED", tc.trusted)
				pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "user.yaml", src)), PolicyMatcherOptions{})
				if err != nil {
					t.Fatal(err)
				}
				seen := make(chan http.Header, 4)
				_, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {
					seen <- r.Header.Clone()
				})
				forged := map[string]string{"X-User": "admin"}
				if a := do(t, c, "GET", base+"/x", forged); a.status != 200 {
					t.Fatalf("status %d %s", a.status, a.body)
				}
				h := <-seen
				if _, ok := h["X-User"]; ok != tc.kept {
					t.Errorf("X-User reached the upstream: %v (%q), want %v", ok, h.Values("X-User"), tc.kept)
				}
			})
		})
	}
}
