package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// loadSchool compiles examples/school.yaml, the seeds' school office;
// edit, if set, changes the file first.
func loadSchool(t testing.TB, edit ...func(*config.File)) *policy.Policy {
	t.Helper()
	f, err := config.Load("../examples/school.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edit {
		e(f)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSchoolExampleVerify reproduces lesson 07's "Verify" with the bundled
// examples/school.yaml, through the reverse proxy to a real upstream on
// loopback, with the engine over the memory store on a clock the test
// moves.
func TestSchoolExampleVerify(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testSchoolExampleVerify)
}

func testSchoolExampleVerify(t *testing.T, fr string) {
	up := newUpstream(t, nil)
	upURL, _ := url.Parse(up.URL)
	clock := newTestClock() // 10:00 UTC, 15:30 in Kolkata
	store := newMemStore(t, clock.Now)
	// The file's header switches apply: turn on the legacy fields and the
	// binding limit's name.
	pol := loadSchool(t, func(f *config.File) {
		f.Server.Headers.XRateLimit = true
		f.Server.Headers.BindingLimit = "Floodgate-Limit"
	})
	pm, err := NewPolicyMatcher(Fixed(pol), PolicyMatcherOptions{Upstream: upURL})
	if err != nil {
		t.Fatal(err)
	}
	engine := limiter.New(store, limiter.Options{})
	g, err := New(Options{Matcher: pm, Engine: engine})
	if err != nil {
		t.Fatal(err)
	}
	frontURL := serveFront(t, fr, g, nil)
	c := newClient(t)
	burst := func(n int, path string, hdr map[string]string) []answer {
		return doN(t, c, n, frontURL+path, hdr)
	}

	// Stage dev: 8 requests in the same instant, then one second later.
	as := burst(8, "/students/9", nil)
	if got, want := statuses(as), []int{200, 200, 200, 200, 200, 429, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("same instant: %v, want %v", got, want)
	}
	for _, a := range as[5:] {
		checkFields(t, a, "stage.dev", 0, 1, 1)
		if a.header.Get("Floodgate-Limit") != "stage.dev" {
			t.Errorf("Floodgate-Limit %q", a.header.Get("Floodgate-Limit"))
		}
		if a.header.Get("X-RateLimit-Limit") != "5" || a.header.Get("X-RateLimit-Remaining") != "0" || a.header.Get("X-RateLimit-Reset") != "1" {
			t.Errorf("legacy fields %v", a.header)
		}
		if strings.Contains(a.header.Get("RateLimit"), "per-ip-burst-trial") {
			t.Errorf("a shadow limit appears in RateLimit: %s", a.header.Get("RateLimit"))
		}
	}
	clock.Advance(time.Second)
	as = burst(6, "/students/9", nil)
	if got, want := statuses(as), []int{200, 200, 200, 200, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("one second later: %v, want %v", got, want)
	}

	// partner-basic: 200 200 429 429.
	clock.Advance(time.Second)
	as = burst(4, "/partner/students/9", map[string]string{"x-api-key": "key-partner-1"})
	if got, want := statuses(as), []int{200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("partner-basic: %v, want %v", got, want)
	}
	for _, a := range as[2:] {
		checkFields(t, a, "partner-basic.rate", 0, 1, 1)
	}

	// Unknown key → 403.
	a := do(t, c, "GET", frontURL+"/partner/students/9", map[string]string{"x-api-key": "key-unknown"})
	if a.status != 403 || strings.TrimSpace(a.body) != `{"message":"Forbidden"}` {
		t.Errorf("unknown key: %d %q", a.status, a.body)
	}

	// Trial quota of 3: 200 200 200 429 429 with Limit Exceeded; the quota
	// comes back at midnight in Kolkata, 8 h 30 min after 15:30 less the
	// 2 s the test moved the clock.
	as = burst(5, "/partner/students/9", map[string]string{"x-api-key": "key-trial"})
	if got, want := statuses(as), []int{200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("trial quota: %v, want %v", got, want)
	}
	const untilMidnight = 8*3600 + 30*60 - 2
	for _, a := range as[3:] {
		if strings.TrimSpace(a.body) != `{"message":"Limit Exceeded"}` {
			t.Errorf("quota body %q", a.body)
		}
		checkFields(t, a, "trial.quota", 0, untilMidnight, untilMidnight)
	}
	if got := up.served.Load(); got != 5+5+2+3 {
		t.Errorf("upstream served %d, want 15", got)
	}
}

// TestSchoolLoginCountsFailures: the example's login limit (5 a minute per
// address, counting only 401 and 403) lets correct logins through freely,
// refuses the 6th try after 5 failures without asking the upstream, and
// forgets a failure a minute later.
func TestSchoolLoginCountsFailures(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testSchoolLoginCountsFailures)
}

func testSchoolLoginCountsFailures(t *testing.T, fr string) {
	var reached atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	upURL, _ := url.Parse(up.URL)
	clock := newTestClock()
	pm, err := NewPolicyMatcher(Fixed(loadSchool(t)), PolicyMatcherOptions{Upstream: upURL})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	frontURL := serveFront(t, fr, g, nil)
	c := newClient(t)
	login := func(pw string) answer {
		a := do(t, c, "POST", frontURL+"/login", map[string]string{"X-Password": pw})
		clock.Advance(time.Second)
		return a
	}
	var got []int
	for _, pw := range []string{"right", "wrong", "wrong", "right", "wrong", "wrong", "wrong", "right", "wrong"} {
		got = append(got, login(pw).status)
	}
	if want := []int{200, 401, 401, 200, 401, 401, 401, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("logins %v, want %v", got, want)
	}
	if n := reached.Load(); n != 7 {
		t.Errorf("upstream reached %d times, want 7", n)
	}
	// The first failure was at 1 s; at 61 s it has left the window.
	clock.Advance(61*time.Second - time.Duration(clock.Now()-newTestClock().Now()))
	if a := login("right"); a.status != 200 {
		t.Errorf("a minute after the first failure: %d", a.status)
	}
}
