package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// schoolOffice is lesson 07's gateway written out by hand: stage dev at
// 5/s burst 5 on every route, usage plans partner-basic (2/s burst 2,
// 1000 a day) and trial (100/s burst 100, 3 a day) on /partner/, which
// requires an API key.
type schoolOffice struct {
	stage, partnerRate, partnerDay, trialRate, trialDay *limiter.Rule
	upstream                                            *url.URL
}

func newSchoolOffice(t *testing.T, upstream string) *schoolOffice {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	return &schoolOffice{
		stage:       ruletest.Rule(t, floodgate.Limit{Name: "stage-dev", Algorithm: floodgate.TokenBucket, Rate: 5, Per: time.Second, Burst: 5}),
		partnerRate: ruletest.Rule(t, floodgate.Limit{Name: "partner-basic", Algorithm: floodgate.TokenBucket, Rate: 2, Per: time.Second, Burst: 2}),
		partnerDay:  ruletest.Rule(t, floodgate.Limit{Name: "partner-basic-quota", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day, Location: time.UTC}),
		trialRate:   ruletest.Rule(t, floodgate.Limit{Name: "trial", Algorithm: floodgate.TokenBucket, Rate: 100, Per: time.Second, Burst: 100}),
		trialDay:    ruletest.Rule(t, floodgate.Limit{Name: "trial-quota", Algorithm: floodgate.Quota, Max: 3, Period: floodgate.Day, Location: time.UTC}),
		upstream:    u,
	}
}

func (o *schoolOffice) Match(r *Request, m *Match) error {
	m.Route = "school"
	m.Upstream = o.upstream
	if strings.HasPrefix(r.Path, "/partner/") {
		switch key := r.Header.Get("X-Api-Key"); key {
		case "key-partner-1":
			m.Hits = append(m.Hits, limiter.Hit{Rule: o.partnerDay, Key: key, Cost: 1}, limiter.Hit{Rule: o.partnerRate, Key: key, Cost: 1})
		case "key-trial":
			m.Hits = append(m.Hits, limiter.Hit{Rule: o.trialDay, Key: key, Cost: 1}, limiter.Hit{Rule: o.trialRate, Key: key, Cost: 1})
		default:
			m.Reject = http.StatusForbidden
			return nil
		}
	}
	m.Hits = append(m.Hits, limiter.Hit{Rule: o.stage, Key: "dev", Cost: 1})
	return nil
}

// TestLesson07Verify reproduces lesson 07's "Verify" through the reverse
// proxy, on loopback, with a real upstream and the memory store on a clock
// the test moves.
func TestLesson07Verify(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testLesson07Verify)
}

func testLesson07Verify(t *testing.T, fr string) {
	up := newUpstream(t, nil)
	clock := newTestClock()
	store := newMemStore(t, clock.Now)
	office := newSchoolOffice(t, up.URL)
	g, err := New(Options{Matcher: office, Engine: limiter.New(store, limiter.Options{}), Fields: fields.Options{LimitName: "Floodgate-Limit"}})
	if err != nil {
		t.Fatal(err)
	}
	frontURL := serveFront(t, fr, g, nil)
	c := newClient(t)

	burst := func(n int, path string, hdr map[string]string) []answer {
		return doN(t, c, n, frontURL+path, hdr)
	}

	// stage dev: rate 5/s, burst 5 — 8 requests in the same instant.
	as := burst(8, "/notices", nil)
	if got, want := statuses(as), []int{200, 200, 200, 200, 200, 429, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("same instant: %v, want %v", got, want)
	}
	// The first 200 leaves 4 tokens; the 5th is back in 200 ms: t=1.
	checkFields(t, as[0], "stage-dev", 4, 1, 0)
	checkFields(t, as[4], "stage-dev", 0, 1, 0)
	for _, a := range as[5:] {
		// Empty bucket: one token back in 200 ms → Retry-After 1, t=1.
		checkFields(t, a, "stage-dev", 0, 1, 1)
		if strings.TrimSpace(a.body) != `{"message":"Too Many Requests"}` {
			t.Errorf("429 body %q", a.body)
		}
		if a.header.Get("Floodgate-Limit") != "stage-dev" {
			t.Errorf("Floodgate-Limit %q", a.header.Get("Floodgate-Limit"))
		}
	}
	// One second later.
	clock.Advance(time.Second)
	as = burst(6, "/notices", nil)
	if got, want := statuses(as), []int{200, 200, 200, 200, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("one second later: %v, want %v", got, want)
	}
	checkFields(t, as[5], "stage-dev", 0, 1, 1)

	// The usage plan partner-basic (2/s, burst 2): 200 200 429 429.
	clock.Advance(time.Second)
	partner := map[string]string{"x-api-key": "key-partner-1"}
	as = burst(4, "/partner/students/9", partner)
	if got, want := statuses(as), []int{200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("partner-basic: %v, want %v", got, want)
	}
	for _, a := range as[2:] {
		// Empty bucket of 2/s: a token in 500 ms → t=1, Retry-After 1.
		checkFields(t, a, "partner-basic", 0, 1, 1)
	}
	// The quota and the stage are listed after the binding limit.
	if rl := as[2].header.Get("RateLimit"); !strings.Contains(rl, `"partner-basic-quota";r=998;t=50398`) || !strings.Contains(rl, `"stage-dev";r=3`) {
		t.Errorf("RateLimit %q", rl)
	}

	// Unknown key and no key: 403 Forbidden.
	for _, hdr := range []map[string]string{{"x-api-key": "key-nobody"}, nil} {
		a := do(t, c, "GET", frontURL+"/partner/students/9", hdr)
		if a.status != 403 || strings.TrimSpace(a.body) != `{"message":"Forbidden"}` {
			t.Errorf("key %v: %d %q", hdr, a.status, a.body)
		}
	}

	// The trial plan with a quota of 3 a day: 200 200 200 429 429, Limit Exceeded.
	clock.Advance(time.Second)
	as = burst(5, "/partner/students/9", map[string]string{"x-api-key": "key-trial"})
	if got, want := statuses(as), []int{200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("trial quota: %v, want %v", got, want)
	}
	// The clock is at 10:00:03 UTC: the day's quota is back at midnight,
	// 13 h 59 min 57 s later.
	const untilMidnight = 14*3600 - 3
	for _, a := range as[3:] {
		if strings.TrimSpace(a.body) != `{"message":"Limit Exceeded"}` {
			t.Errorf("quota 429 body %q", a.body)
		}
		checkFields(t, a, "trial-quota", 0, untilMidnight, untilMidnight)
	}
	if got := up.served.Load(); got != 5+5+2+3 {
		t.Errorf("upstream served %d requests, want 15", got)
	}
}
