package policy_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

func TestLesson07Stage(t *testing.T) {
	t.Parallel()
	r := newRig(t, example(t), t0)
	req := &policy.Request{Method: "GET", Path: "/students/9", ClientIP: ip("198.51.100.7")}
	if got := r.statuses(8, req); got != "200 200 200 200 200 429 429 429" {
		t.Errorf("8 at once: %s", got)
	}
	a := r.do(req)
	if a.binding != "stage.dev" || a.message != "Too Many Requests" || a.res.RetryAfter <= 0 {
		t.Errorf("denial %+v", a)
	}
	r.clk.add(time.Second)
	if got := r.statuses(6, req); got != "200 200 200 200 200 429" {
		t.Errorf("one second later: %s", got)
	}
}

func TestLesson07Plans(t *testing.T) {
	t.Parallel()
	r := newRig(t, example(t), t0)
	partner := &policy.Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.7"), APIKey: "key-partner-1"}
	if got := r.statuses(2, partner); got != "200 200" {
		t.Errorf("partner-basic: %s", got)
	}
	for range 2 {
		if a := r.do(partner); a.status != 429 || a.binding != "partner-basic.rate" || a.message != "Too Many Requests" {
			t.Errorf("partner-basic over its rate: %+v", a)
		}
	}
	for _, key := range []string{"", "key-unknown"} {
		a := r.do(&policy.Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.7"), APIKey: key})
		if a.status != 403 || a.message != "Forbidden" {
			t.Errorf("key %q: %+v", key, a)
		}
	}
	trial := &policy.Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.8"), APIKey: "key-trial"}
	if got := r.statuses(3, trial); got != "200 200 200" {
		t.Errorf("trial: %s", got)
	}
	for range 2 {
		if a := r.do(trial); a.status != 429 || a.binding != "trial.quota" || a.message != "Limit Exceeded" {
			t.Errorf("trial over its quota: %+v", a)
		}
	}
	// The quota is per day in Asia/Kolkata: 09:00 UTC is 14:30 there; the
	// next period starts at 18:30 UTC.
	r.clk.set(time.Date(2026, 11, 30, 18, 29, 59, 0, time.UTC))
	if a := r.do(trial); a.status != 429 {
		t.Errorf("before local midnight: %+v", a)
	}
	r.clk.set(time.Date(2026, 11, 30, 18, 30, 0, 0, time.UTC))
	if got := r.statuses(4, trial); got != "200 200 200 429" {
		t.Errorf("after local midnight: %s", got)
	}
}

// TestReportedLimit checks that the most specific denying limit is the one
// reported when several deny, and that Retry-After is the longest wait.
func TestReportedLimit(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: r, match: {paths: ["/x"]}, stage: s, upstream: none}
stages:
  - {name: s, rate: 1, per: 10s, burst: 1}
limits:
  - {name: per-route, rate: 1, per: 1s, burst: 1, key: route}
  - {name: method, rate: 1, per: 2s, burst: 1, key: client_ip, scope: method, match: {methods: [GET]}}
  - {name: global, rate: 1, per: 1m, burst: 1, key: global, scope: global}
`)
	r := newRig(t, p, t0)
	req := &policy.Request{Method: "GET", Path: "/x", ClientIP: ip("198.51.100.7")}
	if a := r.do(req); a.status != 200 {
		t.Fatalf("first: %+v", a)
	}
	a := r.do(req)
	if a.binding != "method" {
		t.Errorf("binding %s, want the method limit (most specific)", a.binding)
	}
	if a.res.RetryAfter != time.Minute {
		t.Errorf("retry after %v, want the longest wait (1m)", a.res.RetryAfter)
	}
	// After 2s the method and route limits pass; the stage (10s) denies.
	r.clk.add(2 * time.Second)
	if a := r.do(req); a.binding != "stage.s" {
		t.Errorf("binding %s, want stage.s", a.binding)
	}
	r.clk.add(8 * time.Second)
	if a := r.do(req); a.binding != "global" {
		t.Errorf("binding %s, want global", a.binding)
	}
}

// TestAllOrNothing checks that a request denied by one layer charges none.
func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, example(t), t0)
	req := &policy.Request{Method: "GET", Path: "/students/9", ClientIP: ip("198.51.100.7")}
	r.statuses(20, req) // 5 pass, 15 denied by stage.dev
	if got := r.remaining(req, "per-ip-flood"); got != 2000-5 {
		t.Errorf("per-ip-flood remaining %d, want %d (denied requests must not count)", got, 2000-5)
	}
	if got := r.remaining(req, "account"); got != 5000-5 {
		t.Errorf("account remaining %d, want %d", got, 5000-5)
	}
	// A plan whose stage denies keeps its quota.
	p := compile(t, `
routes:
  - {name: r, match: {paths: ["/x"]}, stage: s, api_key_required: true, upstream: none}
stages:
  - {name: s, rate: 1, per: 1h, burst: 2}
plans:
  - {name: p, rate: 100, quota: {limit: 10, period: DAY}}
keys:
  - {name: k, plan: p, sha256: `+config.HashKey("secret-k")+`}
`)
	r = newRig(t, p, t0)
	req = &policy.Request{Method: "GET", Path: "/x", ClientIP: ip("198.51.100.7"), APIKey: "secret-k"}
	if got := r.statuses(6, req); got != "200 200 429 429 429 429" {
		t.Errorf("statuses %s", got)
	}
	if got := r.remaining(req, "p.quota"); got != 8 {
		t.Errorf("quota remaining %d, want 8", got)
	}
}

func TestShadow(t *testing.T) {
	t.Parallel()
	p := compile(t, `
limits:
  - {name: strict, rate: 1, per: 1h, burst: 1, shadow: true}
  - {name: loose, rate: 100, burst: 100}
`)
	r := newRig(t, p, t0)
	req := &policy.Request{Method: "GET", Path: "/", ClientIP: ip("198.51.100.7")}
	for i := range 5 {
		a := r.do(req)
		if a.status != 200 {
			t.Fatalf("request %d: %+v (a shadow limit blocked)", i, a)
		}
		if i > 0 && !a.res.ShadowDenied {
			t.Errorf("request %d: shadow denial not reported", i)
		}
	}
	if got := r.remaining(req, "strict"); got != 0 {
		t.Errorf("shadow limit remaining %d: it must count", got)
	}
	if got := r.remaining(req, "loose"); got != 95 {
		t.Errorf("loose remaining %d, want 95", got)
	}
}

func quotaRig(t *testing.T, quota string, start time.Time) (*rig, *policy.Request) {
	t.Helper()
	p := compile(t, "limits:\n  - {name: q, algorithm: quota, key: user, "+quota+"}\n")
	return newRig(t, p, start), &policy.Request{Method: "GET", Path: "/", ClientIP: ip("198.51.100.7"), User: "u"}
}

func TestQuotaKolkataMidnight(t *testing.T) {
	t.Parallel()
	kol, _ := time.LoadLocation("Asia/Kolkata")
	r, req := quotaRig(t, "limit: 2, period: DAY, time_zone: Asia/Kolkata", time.Date(2026, 6, 1, 0, 0, 0, 0, kol))
	if got := r.statuses(3, req); got != "200 200 429" {
		t.Errorf("day 1: %s", got)
	}
	r.clk.set(time.Date(2026, 6, 1, 23, 59, 59, 0, kol))
	if got := r.statuses(1, req); got != "429" {
		t.Errorf("23:59:59 IST: %s", got)
	}
	r.clk.set(time.Date(2026, 6, 2, 0, 0, 0, 0, kol)) // 18:30 UTC
	if got := r.statuses(3, req); got != "200 200 429" {
		t.Errorf("after midnight IST: %s", got)
	}
	a := r.do(req)
	if a.message != "Limit Exceeded" {
		t.Errorf("quota denial message %q", a.message)
	}
}

func TestQuotaAcrossDST(t *testing.T) {
	t.Parallel()
	ny, _ := time.LoadLocation("America/New_York")
	// 2026-03-08 is 23 hours long in New York.
	r, req := quotaRig(t, "limit: 1, period: DAY, time_zone: America/New_York", time.Date(2026, 3, 8, 0, 30, 0, 0, ny))
	if got := r.statuses(2, req); got != "200 429" {
		t.Errorf("Mar 8: %s", got)
	}
	r.clk.set(time.Date(2026, 3, 8, 23, 59, 0, 0, ny))
	if got := r.statuses(1, req); got != "429" {
		t.Errorf("Mar 8 23:59: %s", got)
	}
	// 00:30 on Mar 9 is 23 h after 00:30 on Mar 8: a period counted as
	// 24 hours would still deny.
	r.clk.set(time.Date(2026, 3, 9, 0, 30, 0, 0, ny))
	if got := r.statuses(2, req); got != "200 429" {
		t.Errorf("Mar 9: %s", got)
	}
	// Autumn: 2026-11-01 is 25 hours long.
	r.clk.set(time.Date(2026, 11, 1, 0, 10, 0, 0, ny))
	if got := r.statuses(2, req); got != "200 429" {
		t.Errorf("Nov 1: %s", got)
	}
	r.clk.set(time.Date(2026, 11, 1, 23, 50, 0, 0, ny)) // 24 h 40 min later
	if got := r.statuses(1, req); got != "429" {
		t.Errorf("Nov 1 23:50 (same local day): %s", got)
	}
	r.clk.set(time.Date(2026, 11, 2, 0, 0, 0, 0, ny))
	if got := r.statuses(1, req); got != "200" {
		t.Errorf("Nov 2: %s", got)
	}
}

func TestQuotaWeekISO(t *testing.T) {
	t.Parallel()
	// 2026-11-23 and 2026-11-30 are Mondays.
	r, req := quotaRig(t, "limit: 1, period: WEEK", time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	if got := r.statuses(2, req); got != "200 429" {
		t.Errorf("Monday: %s", got)
	}
	r.clk.set(time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC)) // Sunday
	if got := r.statuses(1, req); got != "429" {
		t.Errorf("Sunday: %s", got)
	}
	r.clk.set(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	if got := r.statuses(2, req); got != "200 429" {
		t.Errorf("next Monday: %s", got)
	}
}

func TestQuotaMonthAnchor(t *testing.T) {
	t.Parallel()
	r, req := quotaRig(t, "limit: 1, period: MONTH, anchor_day: 15", time.Date(2026, 1, 20, 12, 0, 0, 0, time.UTC))
	if got := r.statuses(2, req); got != "200 429" {
		t.Errorf("Jan 20: %s", got)
	}
	r.clk.set(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) // a calendar month, not a billing month
	if got := r.statuses(1, req); got != "429" {
		t.Errorf("Feb 1: %s", got)
	}
	r.clk.set(time.Date(2026, 2, 14, 23, 59, 59, 0, time.UTC))
	if got := r.statuses(1, req); got != "429" {
		t.Errorf("Feb 14: %s", got)
	}
	r.clk.set(time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC))
	if got := r.statuses(2, req); got != "200 429" {
		t.Errorf("Feb 15: %s", got)
	}
}

func TestQuotaOffset(t *testing.T) {
	t.Parallel()
	r, req := quotaRig(t, "limit: 10, offset: 4, start: 2026-03-01, period: MONTH", time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC))
	if got := r.statuses(7, req); got != "200 200 200 200 200 200 429" {
		t.Errorf("first period (10 - offset 4): %s", got)
	}
	r.clk.set(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	n := 0
	for r.do(req).status == 200 && n < 20 {
		n++
	}
	if n != 10 {
		t.Errorf("second period allowed %d, want 10", n)
	}
}

// TestQuotaOffsetStartsOnADayWithoutMidnight: a quota whose start is a
// date that begins at 01:00 (Havana moves its clocks from 00:00 to 01:00
// on 8 March 2026) takes its offset from the period of that date, not
// from the day before, for a daily quota and a monthly one anchored on
// the 8th.
func TestQuotaOffsetStartsOnADayWithoutMidnight(t *testing.T) {
	t.Parallel()
	havana, _ := time.LoadLocation("America/Havana")
	for _, c := range []struct {
		period      string
		before, day string // statuses the day before the start and on it
	}{
		{"DAY", "200 200 200 200 200 200 200 200 200 200 429", "200 200 200 200 200 200 429"},
		{"MONTH, anchor_day: 8", "200 200 200 200 200 200 200 200 200 200 429", "200 200 200 200 200 200 429"},
	} {
		quota := "limit: 10, offset: 4, start: 2026-03-08, time_zone: America/Havana, period: " + c.period
		r, req := quotaRig(t, quota, time.Date(2026, 3, 7, 12, 0, 0, 0, havana))
		if got := r.statuses(11, req); got != c.before {
			t.Errorf("%s, 7 March, the day before the start: %s, want %s", c.period, got, c.before)
		}
		r.clk.set(time.Date(2026, 3, 8, 12, 0, 0, 0, havana))
		if got := r.statuses(7, req); got != c.day {
			t.Errorf("%s, 8 March, the first period (10 less the offset of 4): %s, want %s", c.period, got, c.day)
		}
	}
}

// TestForbiddenAfterTheKeylessLimits: a request refused for its API key
// is answered 403 once the limits that need no key are charged, so that
// guessing keys is throttled like anything else: past the unknown-key
// limit the answer is 429.
func TestForbiddenAfterTheKeylessLimits(t *testing.T) {
	t.Parallel()
	r := newRig(t, example(t), t0)
	guess := &policy.Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.9"), APIKey: "key-guessed"}
	burst := policy.DefaultUnknownKeyLimit.Burst
	for i := range burst {
		if a := r.do(guess); a.status != 403 || a.message != "Forbidden" {
			t.Fatalf("guess %d: %+v", i, a)
		}
	}
	a := r.do(guess)
	if a.status != 429 || a.binding != policy.UnknownKeyLimitName {
		t.Errorf("guess %d: %+v, want 429 by %s", burst, a, policy.UnknownKeyLimitName)
	}
	if got := r.remaining(guess, "per-ip-flood"); got != 2000-burst {
		t.Errorf("per-ip-flood remaining %d, want %d (each 403 counts, the 429 does not)", got, 2000-burst)
	}
}

// TestConcurrencyEndsWithTheRequest: a request let through holds its
// concurrency lease until it ends, and gives it back then.
func TestConcurrencyEndsWithTheRequest(t *testing.T) {
	t.Parallel()
	r := newRig(t, compile(t, "limits:\n  - {name: inflight, algorithm: concurrency, limit: 1}\n"), t0)
	req := &policy.Request{Method: "GET", Path: "/", ClientIP: ip("198.51.100.7")}
	if got := r.statuses(3, req); got != "200 200 200" {
		t.Errorf("one after another: %s", got)
	}
}
