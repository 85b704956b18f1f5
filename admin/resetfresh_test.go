package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/keystore"
)

// TestResetAfterRecreateCountsAfresh: a reset counts a key afresh, also
// the first reset of a key deleted and made again under its name, in the
// period (a day) its earlier life was reset in. Made again, the key counts
// where it did (its 10 of 10 used: refused); reset, it has its whole quota.
// Before, each lifetime's resets numbered 1, 2, ... from the key's
// record, so the second life's first reset went back to the counters of
// the first life's (key:acme#1), 7 of 10 used that day: the reset gave 3
// requests, not 10.
func TestResetAfterRecreateCountsAfresh(t *testing.T) {
	const src = `routes:
  - {name: api, match: {paths: ["/api/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, rate: 1000, burst: 1000, quota: {limit: 10, period: DAY}}
`
	for _, tc := range []struct {
		name    string
		backend func(t *testing.T) keystore.Backend
	}{
		{"file", func(*testing.T) keystore.Backend { return nil }},
		{"redis", func(t *testing.T) keystore.Backend {
			rs := redistest.Start(t)
			c, err := redisconn.Open("redis://" + rs.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return keystore.NewRedisBackend(c)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPlanRigWith(t, src, time.Date(2026, 6, 10, 9, 0, 0, 0, time.UTC), tc.backend(t))
			tenOK := strings.TrimSuffix(strings.Repeat("OK, ", 10), ", ") + ", Too Many Requests"
			reset := func() KeyView {
				t.Helper()
				var v KeyView
				if st := r.call("POST", "/keys/acme/reset", "", &v); st != http.StatusOK {
					t.Fatalf("reset: %d", st)
				}
				return v
			}

			acme := r.newKey("acme", "basic")
			if got := r.statuses(11, "/api/x", acme); got != tenOK {
				t.Fatalf("the first life: %s, want 10 OK then 429", got)
			}
			r.ns.Add(int64(10 * time.Minute))
			first := reset()
			if got := r.statuses(7, "/api/x", acme); strings.Contains(got, "Too Many") {
				t.Fatalf("7 after the first reset: %s", got)
			}

			r.ns.Add(int64(10 * time.Minute))
			if st := r.call("POST", "/keys/acme/revoke", "", nil); st != http.StatusOK {
				t.Fatalf("revoke: %d", st)
			}
			if st := r.call("DELETE", "/keys/acme", "", nil); st != http.StatusOK {
				t.Fatalf("delete: %d", st)
			}
			acme = r.newKey("acme", "basic")
			if got := r.statuses(1, "/api/x", acme); got != "Too Many Requests" {
				t.Errorf("made again, the key counts where it did before its first reset (10 of 10): %s", got)
			}

			r.ns.Add(int64(10 * time.Minute))
			second := reset()
			if second.Generation == first.Generation {
				t.Errorf("the second life's reset is at generation %d, the first life's", second.Generation)
			}
			var u struct {
				Usage []Use `json:"usage"`
			}
			if st := r.call("GET", "/keys/acme/usage", "", &u); st != http.StatusOK || len(u.Usage) != 2 {
				t.Fatalf("usage: %d %+v", st, u)
			}
			if q := u.Usage[1]; q.Used != 0 || q.Left != 10 {
				t.Errorf("the quota after the second life's reset: %+v, want 10 left", q)
			}
			if got := r.statuses(11, "/api/x", acme); got != tenOK {
				t.Errorf("after the second life's reset: %s, want 10 OK then 429", got)
			}
		})
	}
}
