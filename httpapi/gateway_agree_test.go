package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// agreeAnswer is what a caller is told of one request: the status to
// give, and the fields.
type agreeAnswer struct {
	status                        int
	retryAfter, policy, rateLimit string
}

func (a agreeAnswer) String() string {
	return fmt.Sprintf("%d Retry-After=%q RateLimit-Policy=%q RateLimit=%q", a.status, a.retryAfter, a.policy, a.rateLimit)
}

func agreeAnswerOf(resp *http.Response) agreeAnswer {
	return agreeAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"),
		policy: resp.Header.Get("RateLimit-Policy"), rateLimit: resp.Header.Get("RateLimit")}
}

// agreeGateway serves the policy file src (its routes forwarded to an
// upstream that answers 200) as the gateway and as
// the check API, each on an embedded store of its own on one fixed clock,
// or with shared on one engine, as floodgate serve runs them.
func agreeGateway(t *testing.T, src string, shared bool) (gw, api string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok\n")
	}))
	t.Cleanup(up.Close)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(src, "UPSTREAM", up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	newEngine := func() limiter.Engine {
		st, err := memstore.New(memstore.Options{Now: func() int64 { return fixedNow }, SweepInterval: -1, SnapshotInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return limiter.New(st, limiter.Options{})
	}
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gwEngine, apiEngine := newEngine(), limiter.Engine(nil)
	if shared {
		apiEngine = gwEngine
	} else {
		apiEngine = newEngine()
	}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: gwEngine, Fields: gateway.FieldOptions(p.Server().Headers)})
	if err != nil {
		t.Fatal(err)
	}
	gs := httptest.NewServer(g)
	t.Cleanup(gs.Close)
	as := httptest.NewServer(New(apiEngine, PolicyLimits(func() *policy.Policy { return p }), Options{}))
	t.Cleanup(as.Close)
	return gs.URL, as.URL
}

// TestCheckAgreesWithGatewayOnCosts: a check that gives no cost is one
// request of its limit, charged what the gateway charges one request of
// it: the limit's cost, or its estimate's default when the request does
// not tell one (at most the limit's capacity, as the gateway holds every
// estimate). The gateway and the check API, asked the same sequence on
// the same policy and clock, give the same statuses and fields.
func TestCheckAgreesWithGatewayOnCosts(t *testing.T) {
	gw, api := agreeGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: UPSTREAM}
limits:
  - {name: heavy, algorithm: fixed_window, limit: 10, window: 1m, key: global, cost: 5, match: {paths: ["/heavy"]}}
  - {name: estimated, algorithm: fixed_window, limit: 10, window: 1m, key: global, match: {paths: ["/estimated"]},
     estimate: {header: X-Cost, default: 3}}
  - {name: guessed, algorithm: fixed_window, limit: 10, window: 1m, key: global, match: {paths: ["/guessed"]},
     estimate: {header: X-Cost, default: 50}}
  - {name: plain, algorithm: token_bucket, rate: 2, per: 1m, burst: 2, key: global, match: {paths: ["/plain"]}}
`, false)
	for _, limit := range []string{"heavy", "estimated", "guessed", "plain"} {
		for i := range 5 {
			resp, err := http.Get(gw + "/" + limit)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := agreeAnswerOf(resp)
			resp, _ = post(t, api+"/v1/check", fmt.Sprintf(`{"limit": %q, "key": "global"}`, limit))
			if got := agreeAnswerOf(resp); got != want {
				t.Errorf("%s, request %d:\n  gateway   %s\n  check API %s", limit, i+1, want, got)
			}
		}
	}
}

// TestCheckKeysAndTheGateways holds what the package documentation says a
// check shares with the gateway, both on one engine: a check of a key as
// the gateway spells it ("global") counts on the gateway's counter, one
// of a client's address as sent, or of no key on a global limit, on
// counters the gateway's requests do not touch; and a limit's count_on,
// which waits for a response, charges a check at once.
func TestCheckKeysAndTheGateways(t *testing.T) {
	gw, api := agreeGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: UPSTREAM}
limits:
  - {name: everyone, algorithm: fixed_window, limit: 10, window: 1m, key: global, match: {paths: ["/x"]}}
  - {name: per-client, algorithm: fixed_window, limit: 10, window: 1m, key: client_ip, match: {paths: ["/x"]}}
  - {name: login, algorithm: fixed_window, limit: 10, window: 1m, key: global, count_on: [401], match: {paths: ["/ok"]}}
`, true)
	for range 3 {
		for _, path := range []string{"/x", "/ok"} {
			resp, err := http.Get(gw + path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for body, want := range map[string]float64{
		`{"limit": "everyone"}`:                       9, // a peek counts its own cost as taken
		`{"limit": "per-client", "key": "127.0.0.1"}`: 9,
		`{"limit": "everyone", "key": "global"}`:      6, // the gateway's three requests and the peek
		`{"limit": "login"}`:                          9, // the gateway's 200s charged nothing
	} {
		if _, m := post(t, api+"/v1/peek", body); m["remaining"] != want {
			t.Errorf("peek %s: remaining %v, want %v", body, m["remaining"], want)
		}
	}
	post(t, api+"/v1/check", `{"limit": "login"}`)
	if _, m := post(t, api+"/v1/peek", `{"limit": "login"}`); m["remaining"] != 8.0 {
		t.Errorf("a check of a count_on limit: remaining %v after it, want 8", m["remaining"])
	}
}
