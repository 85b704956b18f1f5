package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestOwnQuotaChangeKeepsTheCount: a key's own quota set mid-period
// changes the size of its period, not what it has used. Lowered below
// what the key used, the key is refused until the period ends (RateLimit r
// 0, never negative; Retry-After the real seconds to the zone's midnight,
// on a 25-hour day), and raised again it gets the difference only.
// Before, each own quota was a counter of its own: a key that had used 6
// of its plan's 10 got 4 more after its quota was lowered to 4 (10 in the
// day against a quota of 4), and 20 more after it was raised to 20.
func TestOwnQuotaChangeKeepsTheCount(t *testing.T) {
	const src = `routes:
  - {name: api, match: {paths: ["/api/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, quota: {limit: 10, period: DAY, time_zone: America/New_York}}
`
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// 00:30 on 1 November 2026, a 25-hour day: its midnight is 24.5 hours
	// away.
	r := newPlanRig(t, src, time.Date(2026, 11, 1, 0, 30, 0, 0, ny))
	acme := r.newKey("acme", "basic")
	if got := r.statuses(6, "/api/x", acme); strings.Contains(got, "Too Many") {
		t.Fatalf("6 of 10: %s", got)
	}
	// A rotation with overlap: both secrets count in the one count.
	var rot struct{ Secret string }
	if st := r.call("POST", "/keys/acme/rotate", `{"overlap":"1h"}`, &rot); st != http.StatusOK || rot.Secret == "" {
		t.Fatalf("rotate: %d", st)
	}
	if st := r.call("PATCH", "/keys/acme", `{"quota":4}`, nil); st != http.StatusOK {
		t.Fatalf("PATCH quota 4: %d", st)
	}
	for _, secret := range []string{acme, rot.Secret} {
		res := r.send("/api/x", secret)
		if res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("after the quota was lowered to 4 below the 6 used: %d, want 429", res.StatusCode)
		}
		if ra := res.Header.Get("Retry-After"); ra != "88200" {
			t.Errorf("Retry-After %q, want 88200 (24.5 hours to midnight in New York)", ra)
		}
		if rl := res.Header.Get("RateLimit"); !strings.Contains(rl, ";r=0;t=88200") {
			t.Errorf("RateLimit %q, want r=0 and t=88200", rl)
		}
	}
	var u struct {
		Usage []Use `json:"usage"`
	}
	if st := r.call("GET", "/keys/acme/usage", "", &u); st != http.StatusOK || len(u.Usage) != 1 {
		t.Fatalf("usage: %d %+v", st, u)
	}
	if q := u.Usage[0]; q.Capacity != 4 || q.Left != 0 || q.Allowed {
		t.Errorf("usage after the quota was lowered: %+v, want capacity 4, nothing left", q)
	}
	if st := r.call("PATCH", "/keys/acme", `{"quota":20}`, nil); st != http.StatusOK {
		t.Fatalf("PATCH quota 20: %d", st)
	}
	want := strings.TrimSuffix(strings.Repeat("OK, ", 14), ", ") + ", Too Many Requests"
	if got := r.statuses(15, "/api/x", rot.Secret); got != want {
		t.Errorf("quota raised to 20 after 6 used: %s, want 14 OK then 429", got)
	}
	// The plan's quota again (0): the same count, against 10.
	if st := r.call("PATCH", "/keys/acme", `{"quota":0}`, nil); st != http.StatusOK {
		t.Fatalf("PATCH quota 0: %d", st)
	}
	if got := r.statuses(1, "/api/x", acme); got != "Too Many Requests" {
		t.Errorf("back to the plan's 10 after 20 used: %s", got)
	}
	// The next day counts afresh, against the plan's 10 (with the new
	// secret: the old one's overlap has ended).
	r.ns.Add(int64(24*time.Hour + 30*time.Minute))
	if got := r.statuses(1, "/api/x", rot.Secret); got != "OK" {
		t.Errorf("the next day: %s", got)
	}
}
