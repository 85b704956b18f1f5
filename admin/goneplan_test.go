package admin

import (
	"net/http"
	"testing"
	"time"
)

// TestKeyOfAGonePlanCanBeDisabled: a key whose plan a reload removed is
// stored and unserved until a later reload gives the plan back. Disabling
// it through the API (PATCH or /disable) and rotating its secret out must
// be kept, so that it is still refused once the plan is back; before,
// both were answered 400 (unknown plan) and the key worked again with the
// plan.
func TestKeyOfAGonePlanCanBeDisabled(t *testing.T) {
	const both = `routes:
  - {name: api, match: {paths: ["/api/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, rate: 100, burst: 100}
  - {name: gold, rate: 100, burst: 100}
`
	const basicOnly = `routes:
  - {name: api, match: {paths: ["/api/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, rate: 100, burst: 100}
`
	r := newPlanRig(t, both, time.Date(2026, 6, 10, 9, 0, 0, 0, time.UTC))
	patched := r.newKey("patched", "gold")
	disabled := r.newKey("disabled", "gold")
	rotated := r.newKey("rotated", "gold")
	if got := r.statuses(1, "/api/x", patched); got != "OK" {
		t.Fatalf("a gold key before the reload: %s", got)
	}
	r.reload(basicOnly)
	var e map[string]any
	if st := r.call("PATCH", "/keys/patched", `{"disabled":true}`, &e); st != http.StatusOK {
		t.Errorf("PATCH disabled of a key whose plan is gone: %d %v, want 200", st, e)
	}
	if st := r.call("POST", "/keys/disabled/disable", "", &e); st != http.StatusOK {
		t.Errorf("POST /disable of a key whose plan is gone: %d %v, want 200", st, e)
	}
	if st := r.call("POST", "/keys/rotated/rotate", `{"overlap":"0s"}`, &e); st != http.StatusOK {
		t.Errorf("POST /rotate of a key whose plan is gone: %d %v, want 200", st, e)
	}
	if st := r.call("PATCH", "/keys/patched", `{"rate":5}`, &e); st != http.StatusBadRequest {
		t.Errorf("PATCH rate of a key whose plan is gone: %d %v, want 400", st, e)
	}
	r.reload(both)
	for name, secret := range map[string]string{"patched": patched, "disabled": disabled, "rotated": rotated} {
		if got := r.statuses(1, "/api/x", secret); got != "Forbidden" {
			t.Errorf("key %s, turned off while its plan was gone, once the plan is back: %s, want Forbidden", name, got)
		}
	}
}
