package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate/penalty"
)

// TestMadeUpKeysFillNoBans: a client sends made-up API keys to a route
// that requires one, under a rule that bans API keys answered 403, to a
// penalty box of 5 bans. Each is answered 403 and earns no ban, so that
// the box is not filled with bans of keys the client never sends again:
// afterwards an address that spends its own limit is still banned.
func TestMadeUpKeysFillNoBans(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testMadeUpKeysFillNoBans)
}

func testMadeUpKeysFillNoBans(t *testing.T, fr string) {
	sum := sha256.Sum256([]byte("key-acme"))
	p := compilePolicy(t, "madeup.yaml", fmt.Sprintf(`
server:
  trusted_proxies: [127.0.0.1]
  bans:
    - {name: keys, key: api_key, after: 1, within: 1h, ban: 1h, count_on: [403]}
    - {name: flood, key: client_ip, after: 1, within: 1h, ban: 1h}
plans: [{name: gold, rate: 1, per: 1h, burst: 100, routes: [paid]}]
keys:
  - {name: acme, plan: gold, sha256: %q}
routes:
  - {name: paid, match: {paths: ["/paid/**"]}, upstream: http://127.0.0.1:9, api_key_required: true}
  - {name: open, match: {paths: ["/open/**"]}, upstream: http://127.0.0.1:9}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 1, match: {routes: [open]}}
`, hex.EncodeToString(sum[:])))
	box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(5, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(box.Close)
	_, base, c := startFront(t, fr, Options{Matcher: mustPolicyMatcher(t, p), Engine: memEngine(t), Gatekeeper: boxKeeper{box}},
		func(http.ResponseWriter, *http.Request) {})
	for i := range 15 {
		r := do(t, c, "GET", base+"/paid/", map[string]string{"X-Forwarded-For": "192.0.2.1", "X-API-Key": fmt.Sprintf("made-up-%d", i)})
		if r.status != http.StatusForbidden {
			t.Fatalf("made-up key %d: %d, want 403", i, r.status)
		}
	}
	time.Sleep(100 * time.Millisecond) // the gatekeeper is told of a request once it is answered
	if bans, err := box.List(t.Context()); err != nil || len(bans) != 0 {
		t.Errorf("15 made-up keys answered 403: %d bans of at most 5 (%v), want none", len(bans), err)
	}
	a := map[string]string{"X-Forwarded-For": "192.0.2.2"}
	if got := statuses(doN(t, c, 2, base+"/open/", a)); got[0] != http.StatusOK || got[1] != http.StatusTooManyRequests {
		t.Fatalf("the offender's two requests: %v, want [200 429]", got)
	}
	pollUntilFor(t, "the offender's ban after a flood of made-up keys", 5*time.Second, func() bool {
		_, _, banned := box.Banned("192.0.2.2", "", "")
		return banned
	})
}
