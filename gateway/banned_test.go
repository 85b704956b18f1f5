package gateway

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/penalty"
)

// TestBannedRetriesChargeAndOffendNothing: a client banned by the penalty
// box (a rule of per-address refusals, ban 1m) retries through its ban.
// Each retry is answered 429 with Retry-After until the ban ends and no
// RateLimit fields; it charges no limit, so the limit the client shares
// with others (global) keeps the units it had for them; and it is no
// offence, not even of another rule that counts the 429s a client gets
// (count_on: [429], three within a minute, ban 1h), so retrying does not
// lengthen the ban however often the client does it.
func TestBannedRetriesChargeAndOffendNothing(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testBannedRetriesChargeAndOffendNothing)
}

func testBannedRetriesChargeAndOffendNothing(t *testing.T, fr string) {
	p := compilePolicy(t, "banned.yaml", `
server:
  trusted_proxies: [127.0.0.1]
  bans:
    - {name: noisy, key: client_ip, after: 3, within: 1m, ban: 1h, count_on: [429]}
    - {name: flood, key: client_ip, after: 1, within: 1m, ban: 1m}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: http://127.0.0.1:9}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 1}
  - {name: everyone, key: global, rate: 1, per: 1h, burst: 100}
`)
	box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(box.Close)
	_, base, c := startFront(t, fr, Options{Matcher: mustPolicyMatcher(t, p), Engine: memEngine(t), Gatekeeper: boxKeeper{box}},
		func(http.ResponseWriter, *http.Request) {})
	a := map[string]string{"X-Forwarded-For": "192.0.2.1"}
	if got := statuses(doN(t, c, 2, base+"/", a)); got[0] != 200 || got[1] != 429 {
		t.Fatalf("the offender's first two requests: %v, want [200 429]", got)
	}
	var until time.Time
	pollUntilFor(t, "the offender's ban", 5*time.Second, func() bool {
		var banned bool
		_, until, banned = box.Banned("192.0.2.1", "", "")
		return banned
	})
	for i := range 8 {
		r := do(t, c, "GET", base+"/", a)
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != http.StatusTooManyRequests || err != nil || ra < 1 || ra > 60 || r.header.Get("RateLimit") != "" ||
			r.body != `{"message":"Too Many Requests"}`+"\n" {
			t.Fatalf("banned retry %d: %d Retry-After %q RateLimit %q %q; want 429, Retry-After until the ban ends (at most 60), no RateLimit",
				i, r.status, r.header.Get("Retry-After"), r.header.Get("RateLimit"), r.body)
		}
	}
	time.Sleep(100 * time.Millisecond) // the gatekeeper is told of a request once it is answered
	if _, u, banned := box.Banned("192.0.2.1", "", ""); !banned || !u.Equal(until) {
		t.Errorf("after eight banned retries the ban ends at %v (banned %v), want %v: the retries offended", u, banned, until)
	}
	b := do(t, c, "GET", base+"/", map[string]string{"X-Forwarded-For": "192.0.2.2"})
	if b.status != 200 || remaining(t, b, "everyone") != 98 {
		t.Errorf("another client: %d, RateLimit %q; want 200 and everyone r=98 (the banned retries charged nothing)", b.status, b.header.Get("RateLimit"))
	}
}
