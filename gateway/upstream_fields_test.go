package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/floodgate/floodgate/limiter"
)

// An upstream (or the middleware's next handler) that sends rate-limit
// fields of its own does not push the gateway's behind them: on every
// front the gateway's RateLimit-Policy, RateLimit and legacy fields come
// first, its binding limit first among them, and the upstream's follow,
// so that a client reading the first line of a field reads the gateway's.
func TestUpstreamRateLimitFieldsFollowTheGateways(t *testing.T) {
	own := func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("RateLimit-Policy", `"upstream";q=100;w=60`)
		h.Add("RateLimit", `"upstream";r=99;t=60`)
		h.Add("X-RateLimit-Limit", "100")
		h.Add("X-RateLimit-Remaining", "99")
		h.Add("X-RateLimit-Reset", "60")
		_, _ = w.Write([]byte("ok\n"))
	}
	want := map[string][]string{
		"Ratelimit-Policy":      {`"per-client";q=5;w=60`, `"upstream";q=100;w=60`},
		"Ratelimit":             {`"per-client";r=4;t=12`, `"upstream";r=99;t=60`},
		"X-Ratelimit-Limit":     {"5", "100"},
		"X-Ratelimit-Remaining": {"4", "99"},
		"X-Ratelimit-Reset":     {"12", "60"},
	}
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		up := newUpstream(t, own)
		u, _ := url.Parse(up.URL)
		p := compilePolicy(t, "fields.yaml", `version: 1
server:
  headers: {x_ratelimit: true}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "`+up.URL+`"}
limits:
  - {name: per-client, rate: 5, per: 1m, key: client_ip}
`)
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{Upstream: u})
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{})})
		if err != nil {
			t.Fatal(err)
		}
		var next http.HandlerFunc
		if fr == frontMiddleware {
			next = own
		}
		a := do(t, newClient(t), "GET", serveFront(t, fr, g, next)+"/x", nil)
		if a.status != http.StatusOK {
			t.Fatalf("status %d, want 200", a.status)
		}
		for name, lines := range want {
			if got := a.header[name]; !slices.Equal(got, lines) {
				t.Errorf("%s: %q, want %q", name, got, lines)
			}
		}
	})
}
