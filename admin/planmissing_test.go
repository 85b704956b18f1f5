package admin

import (
	"net/http"
	"testing"
	"time"
)

// TestKeyRefusedAfterAReloadIsNotListedActive: a reload that removes a
// plan leaves its keys stored and refused (403); one that makes a key's
// own rate no limit with its plan's (one unit a nanosecond, past the
// fastest) refuses that key too. GET /keys and GET /keys/{name} listed
// both "active", and counted them in GET /plans; they now say
// "plan_missing" and "limits_invalid", which a rotation's answer says too,
// and "active" again once a reload lets them be served.
func TestKeyRefusedAfterAReloadIsNotListedActive(t *testing.T) {
	const routes = `routes:
  - {name: api, match: {paths: ["/api/**"]}, api_key_required: true, upstream: none}
plans:
`
	const before = routes + `  - {name: basic, rate: 100, per: 1s, burst: 100}
  - {name: gold, rate: 100, burst: 100}
`
	const after = routes + `  - {name: basic, rate: 100, per: 10ms, burst: 100}
`
	r := newPlanRig(t, before, time.Date(2026, 6, 10, 9, 0, 0, 0, time.UTC))
	gone := r.newKey("gone", "gold")
	fast := r.newKey("fast", "basic")
	plain := r.newKey("plain", "basic")
	if st := r.call("PATCH", "/keys/fast", `{"rate":1000000000}`, nil); st != http.StatusOK {
		t.Fatalf("PATCH fast: %d", st)
	}
	want := map[string]string{"gone": "active", "fast": "active", "plain": "active"}
	secrets := map[string]string{"gone": gone, "fast": fast, "plain": plain}
	check := func(when string, answers map[string]string) {
		t.Helper()
		var list struct{ Keys []KeyView }
		if st := r.call("GET", "/keys", "", &list); st != http.StatusOK {
			t.Fatalf("%s: GET /keys: %d", when, st)
		}
		listed := map[string]string{}
		for _, k := range list.Keys {
			listed[k.Name] = k.State
		}
		for name, state := range want {
			got := r.statuses(1, "/api/x", secrets[name])
			if got != answers[name] {
				t.Errorf("%s: a request with key %s: %s, want %s", when, name, got, answers[name])
			}
			if listed[name] != state {
				t.Errorf("%s: GET /keys lists %s %q (its requests get %s), want %q", when, name, listed[name], got, state)
			}
			var one KeyView
			if st := r.call("GET", "/keys/"+name, "", &one); st != http.StatusOK || one.State != state {
				t.Errorf("%s: GET /keys/%s: %d %q, want %q", when, name, st, one.State, state)
			}
		}
	}
	check("before the reload", map[string]string{"gone": "OK", "fast": "OK", "plain": "OK"})

	r.reload(after)
	want = map[string]string{"gone": "plan_missing", "fast": "limits_invalid", "plain": "active"}
	check("after the reload", map[string]string{"gone": "Forbidden", "fast": "Forbidden", "plain": "OK"})
	var plans struct {
		Plans []struct {
			Name string
			Keys int
		}
	}
	if st := r.call("GET", "/plans", "", &plans); st != http.StatusOK || len(plans.Plans) != 1 || plans.Plans[0].Keys != 1 {
		t.Errorf("GET /plans: %d %+v, want basic with 1 key (plain)", st, plans.Plans)
	}
	var v KeyView
	if st := r.call("POST", "/keys/gone/rotate", `{"overlap":"0s"}`, &v); st != http.StatusOK || v.State != "plan_missing" {
		t.Errorf("rotating the key whose plan is gone: %d, answered %q, want 200 plan_missing", st, v.State)
	}
	gone = v.Secret

	r.reload(before)
	secrets["gone"] = gone
	want = map[string]string{"gone": "active", "fast": "active", "plain": "active"}
	check("once the plan is back", map[string]string{"gone": "OK", "fast": "OK", "plain": "OK"})
}
