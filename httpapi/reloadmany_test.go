package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// TestSettleAfterManyReloadsOfItsLimit: a reservation is settled on the
// limit it was made on however many reloads changed that limit while it
// was open (an operator's loop that tunes a limit every few seconds, with
// requests between them), not only across the last few of them. On the
// embedded store and on Redis.
func TestSettleAfterManyReloadsOfItsLimit(t *testing.T) {
	t.Parallel()
	policy := func(burst int) string {
		return fmt.Sprintf(`version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: tokens, algorithm: token_bucket, rate: 1, per: 1h, burst: %d, key: global}
`, burst)
	}
	memURL, _, memReload := policyAPI(t, policy(100))
	redis, _ := redisEngine(t, limiter.Options{})
	redisURL, redisReload := policyAPIOn(t, policy(100), redis)
	for _, c := range []struct {
		store  string
		url    string
		reload func(string)
	}{{"memory", memURL, memReload}, {"Redis", redisURL, redisReload}} {
		resp, m := post(t, c.url+"/v1/reserve", `{"limit":"tokens","key":"a","cost":30}`)
		tok, _ := m["reservation"].(string)
		if resp.StatusCode != http.StatusOK || tok == "" {
			t.Fatalf("%s: reserve: %d %v", c.store, resp.StatusCode, m)
		}
		const reloads = 20
		for i := 1; i <= reloads; i++ {
			c.reload(policy(100 + i))
			// A request between reloads: the service runs each version.
			if resp, m := post(t, c.url+"/v1/check", `{"limit":"tokens","key":"other"}`); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: check after reload %d: %d %v", c.store, i, resp.StatusCode, m)
			}
		}
		resp, m = post(t, c.url+"/v1/settle", fmt.Sprintf(`{"reservation":%q,"actual":10}`, tok))
		ds, _ := m["decisions"].([]any)
		if resp.StatusCode != http.StatusOK || len(ds) != 1 {
			t.Errorf("%s: settle after %d reloads of its limit: %d %v, want 200", c.store, reloads, resp.StatusCode, m)
			continue
		}
		if d := ds[0].(map[string]any); d["capacity"] != 100.0 || d["remaining"] != 90.0 {
			t.Errorf("%s: settle after %d reloads: %v, want it on the limit it was made on (capacity 100, 90 left)", c.store, reloads, d)
		}
	}
}

// TestReplacedLimitsStayBounded: an operator's reload loop whose every
// version names its limits afresh (a version in each name) leaves
// PolicyLimits remembering none of the rules no reservation was made on,
// and at most maxReplaced of those reservations were made on, however
// long it runs, the most recent kept.
func TestReplacedLimitsStayBounded(t *testing.T) {
	t.Parallel()
	const perPolicy, versions = 50, 100
	compile := func(v int) *policy.Policy {
		var b strings.Builder
		b.WriteString("version: 1\nroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: \"http://127.0.0.1:9\"}\nlimits:\n")
		for i := range perPolicy {
			fmt.Fprintf(&b, "  - {name: v%d-l%d, rate: 10, per: 1s, key: global}\n", v, i)
		}
		f, err := config.Parse("v.yaml", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Compile(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var cur *policy.Policy
	pl := PolicyLimits(func() *policy.Policy { return cur }).(*policyLimits)
	for v := range versions {
		cur = compile(v)
		if _, ok := pl.Limit(fmt.Sprintf("v%d-l0", v)); !ok {
			t.Fatalf("version %d: its limit is unknown", v)
		}
	}
	if n := pl.remembered(); n != 0 {
		t.Errorf("after %d reloads of %d new limits each, %d replaced rules remembered, none of which a reservation was made on",
			versions, perPolicy, n)
	}
	until := time.Now().Add(time.Hour)
	for v := versions; v < 3*versions; v++ {
		cur = compile(v)
		for i := range perPolicy {
			name := fmt.Sprintf("v%d-l%d", v, i)
			l, ok := pl.Limit(name)
			if !ok {
				t.Fatalf("version %d: %s is unknown", v, name)
			}
			pl.Reserved(name, l.Rule, until.Add(time.Duration(v)*time.Second))
		}
	}
	cur = compile(3 * versions)
	pl.Limit("v0-l0")
	if n := pl.remembered(); n > maxReplaced {
		t.Errorf("after %d reloads of %d new limits each, all reserved on, %d replaced rules remembered, want at most %d",
			2*versions, perPolicy, n, maxReplaced)
	}
	last := compile(3*versions - 1)
	l, _ := last.Limit(fmt.Sprintf("v%d-l0", 3*versions-1))
	if pl.ReplacedRule(l.Name, l.Rule.ID()) == nil {
		t.Errorf("the rule of the last version, reserved on, is forgotten")
	}
}
