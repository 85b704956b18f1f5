package gateway

import (
	"net/http"
	"slices"
	"testing"
)

const remainingPolicy = `
server:
  upstream:
    identity_headers: {remaining: X-Floodgate-Remaining}
routes:
  - {name: one, match: {paths: ["/one/**"]}, upstream: "http://127.0.0.1:1"}
  - {name: many, match: {paths: ["/many/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: single, rate: 1, per: 1h, burst: 5, match: {routes: [one]}}
  - {name: per-ip, rate: 1, per: 1h, burst: 7, match: {routes: [many]}}
  - {name: per-tenant, rate: 1, per: 1h, burst: 3, key: "header:X-Tenant", match: {routes: [many]}}
  - {name: everyone, key: global, rate: 1, per: 1h, burst: 1000, match: {routes: [many]}}
`

// TestRemainingHeaderIsTheFewestLeft: the remaining-units header the
// upstream is told (identity_headers.remaining) holds the fewest units
// left among the limits that admitted the request, after its charge: with
// one limit, that limit's count down to 0; with three, the fewest of them
// wherever it lies, as the one with the fewest changes from request to
// request (a tenant's limit, then the address's, never the large global
// one, nor the first limit listed); a client's own copy never reaches the
// upstream.
func TestRemainingHeaderIsTheFewestLeft(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		p := compilePolicy(t, "remaining.yaml", remainingPolicy)
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan []string, 1)
		_, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Values("X-Floodgate-Remaining")
		})
		told := func(path string, hdr map[string]string) string {
			t.Helper()
			if a := do(t, c, "GET", base+path, hdr); a.status != http.StatusOK {
				t.Fatalf("%s %v: status %d %s", path, hdr, a.status, a.body)
			}
			v := <-seen
			if len(v) != 1 {
				t.Fatalf("%s %v: the upstream was told %q, want one value", path, hdr, v)
			}
			return v[0]
		}

		var got []string
		for range 5 {
			got = append(got, told("/one/x", map[string]string{"X-Floodgate-Remaining": "1000"}))
		}
		if want := []string{"4", "3", "2", "1", "0"}; !slices.Equal(got, want) {
			t.Errorf("one limit of 5: the upstream was told %v, want %v", got, want)
		}

		// per-ip (7), per-tenant (3 each) and everyone (1000): t1 spends its
		// 3, then t2 and t3 come while per-ip runs down.
		got = got[:0]
		for _, tenant := range []string{"t1", "t1", "t1", "t2", "t2", "t3"} {
			got = append(got, told("/many/x", map[string]string{"X-Tenant": tenant, "X-Floodgate-Remaining": "1000"}))
		}
		want := []string{"2", "1", "0", "2", "1", "1"}
		if !slices.Equal(got, want) {
			t.Errorf("three limits: the upstream was told %v, want %v (per-tenant's fewest, then per-ip's)", got, want)
		}
	})
}
