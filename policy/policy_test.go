package policy

import (
	"context"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// clock is a settable clock for memstore.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() int64          { return c.ns.Load() }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// rig is a policy checked through the engine over a memstore, answering as
// the gateway does.
type rig struct {
	t     testing.TB
	p     *Policy
	lim   *limiter.Limiter
	store *memstore.Store
	clk   *clock
}

func newRig(t testing.TB, p *Policy, start time.Time) *rig {
	t.Helper()
	clk := &clock{}
	clk.set(start)
	st, err := memstore.New(memstore.Options{Now: clk.now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &rig{t: t, p: p, lim: limiter.New(st, limiter.Options{}), store: st, clk: clk}
}

func compile(t testing.TB, yaml string) *Policy {
	t.Helper()
	f, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	p, err := Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func example(t testing.TB) *Policy {
	t.Helper()
	f, err := config.Load(filepath.Join("..", "examples", "school.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// answer is what a gateway would reply.
type answer struct {
	status  int
	message string
	binding string
	res     limiter.Result
}

// do matches and checks one request.
func (r *rig) do(req *Request) answer {
	r.t.Helper()
	var m Match
	r.p.Match(req, &m)
	if m.Forbidden {
		return answer{status: 403, message: "Forbidden"}
	}
	res, err := r.lim.Check(context.Background(), m.Hits)
	if err != nil {
		r.t.Fatalf("check: %v", err)
	}
	if res.Allowed {
		return answer{status: 200, res: res}
	}
	l := m.Limits[res.Binding]
	msg := "Too Many Requests"
	if l.Kind == floodgate.KindQuota {
		msg = "Limit Exceeded"
	}
	return answer{status: 429, message: msg, binding: l.Name, res: res}
}

func (r *rig) statuses(n int, req *Request) string {
	r.t.Helper()
	var out []string
	for range n {
		a := r.do(req)
		out = append(out, itoa(a.status))
	}
	return strings.Join(out, " ")
}

func itoa(i int) string { return strconv.Itoa(i) }

// remaining peeks the units left of limit name for the request. A peek
// reports what would remain after the request, so an allowed peek gives its
// cost back.
func (r *rig) remaining(req *Request, name string) int64 {
	r.t.Helper()
	var m Match
	r.p.Match(req, &m)
	for i, l := range m.Limits {
		if l.Name == name {
			res, err := r.lim.Peek(context.Background(), m.Hits[i:i+1])
			if err != nil {
				r.t.Fatal(err)
			}
			d := res.Decisions[0]
			if d.Allowed {
				return d.Remaining + m.Hits[i].Cost
			}
			return d.Remaining
		}
	}
	r.t.Fatalf("limit %s does not apply", name)
	return 0
}

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestLesson07Stage(t *testing.T) {
	t.Parallel()
	r := newRig(t, example(t), t0)
	req := &Request{Method: "GET", Path: "/students/9", ClientIP: ip("198.51.100.7")}
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
	partner := &Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.7"), APIKey: "key-partner-1"}
	if got := r.statuses(2, partner); got != "200 200" {
		t.Errorf("partner-basic: %s", got)
	}
	for range 2 {
		if a := r.do(partner); a.status != 429 || a.binding != "partner-basic.rate" || a.message != "Too Many Requests" {
			t.Errorf("partner-basic over its rate: %+v", a)
		}
	}
	for _, key := range []string{"", "key-unknown"} {
		a := r.do(&Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.7"), APIKey: key})
		if a.status != 403 || a.message != "Forbidden" {
			t.Errorf("key %q: %+v", key, a)
		}
	}
	trial := &Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.8"), APIKey: "key-trial"}
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

func TestEvaluationOrder(t *testing.T) {
	t.Parallel()
	p := example(t)
	var m Match
	p.Match(&Request{Method: "POST", Path: "/notices/urgent", ClientIP: ip("198.51.100.7"), User: "teacher-7"}, &m)
	var names []string
	for _, l := range m.Limits {
		names = append(names, l.Name)
	}
	want := "urgent-notices per-parent stage.prod per-ip-flood per-ip-burst-trial sms-provider notice-api account"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("order\n got %s\nwant %s", got, want)
	}
	if len(m.Hits) != len(m.Limits) {
		t.Fatalf("%d hits for %d limits", len(m.Hits), len(m.Limits))
	}
	for i, h := range m.Hits {
		if h.Rule != m.Limits[i].Rule {
			t.Errorf("hit %d has the rule of another limit", i)
		}
	}
	// Plan limits come first, and keys carry no raw API key.
	p.Match(&Request{Method: "GET", Path: "/partner/students/1", ClientIP: ip("198.51.100.7"), APIKey: "key-partner-1"}, &m)
	if m.Limits[0].Name != "partner-basic.rate" || m.Limits[1].Name != "partner-basic.quota" || m.Plan != "partner-basic" || m.KeyName != "partner-1" {
		t.Errorf("plan hits %v %v", m.Limits[0].Name, m.Limits[1].Name)
	}
	for _, h := range m.Hits {
		if strings.Contains(h.Key, "key-partner-1") {
			t.Errorf("hit key %q holds the raw API key", h.Key)
		}
	}
	if l, ok := p.Limit("partner-basic.quota"); !ok || l.Kind != floodgate.KindQuota || l.Fields.Window != 86400 {
		t.Errorf("Limit(partner-basic.quota) = %+v", l)
	}
	if _, ok := p.Limit("nope"); ok {
		t.Error("unknown limit found")
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
	req := &Request{Method: "GET", Path: "/x", ClientIP: ip("198.51.100.7")}
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
	req := &Request{Method: "GET", Path: "/students/9", ClientIP: ip("198.51.100.7")}
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
	req = &Request{Method: "GET", Path: "/x", ClientIP: ip("198.51.100.7"), APIKey: "secret-k"}
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
	req := &Request{Method: "GET", Path: "/", ClientIP: ip("198.51.100.7")}
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

func quotaRig(t *testing.T, quota string, start time.Time) (*rig, *Request) {
	t.Helper()
	p := compile(t, "limits:\n  - {name: q, algorithm: quota, key: user, "+quota+"}\n")
	return newRig(t, p, start), &Request{Method: "GET", Path: "/", ClientIP: ip("198.51.100.7"), User: "u"}
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

func TestKeys(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: r, match: {paths: ["/r"]}, upstream: none}
limits:
  - {name: by-key, rate: 1, per: 1h, burst: 1, key: api_key}
  - {name: by-user-ip, rate: 1, per: 1h, burst: 1, key: [user, client_ip]}
  - {name: by-tenant, rate: 1, per: 1h, burst: 1, key: ["header:X-Tenant", route, stage]}
`)
	var m Match
	h := http.Header{}
	h.Set("X-Tenant", "acme|{evil}")
	p.Match(&Request{Method: "GET", Path: "/r", ClientIP: ip("2001:db8::1"), APIKey: "raw-secret", User: "a|b", Header: h}, &m)
	keys := map[string]string{}
	for i, l := range m.Limits {
		keys[l.Name] = m.Hits[i].Key
	}
	if k := keys["by-key"]; !strings.HasPrefix(k, "keyhash:") || strings.Contains(k, "raw-secret") {
		t.Errorf("unknown key counted as %q", k)
	}
	if k := keys["by-user-ip"]; k != "user:a%7Cb|ip:2001:db8::/64" {
		t.Errorf("composite key %q", k)
	}
	if k := keys["by-tenant"]; k != "h:X-Tenant=acme%7C%7Bevil%7D|route:r|stage:-" {
		t.Errorf("header key %q", k)
	}
	// A request without a user or the header is not counted by those limits.
	p.Match(&Request{Method: "GET", Path: "/r", ClientIP: ip("198.51.100.7")}, &m)
	if len(m.Hits) != 0 {
		t.Errorf("anonymous request got hits %v", m.Limits)
	}
}

func TestMatching(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: one, match: {methods: [GET], paths: ["/students/{id}"], hosts: [api.example.com]}, upstream: none}
  - {name: any-host, match: {paths: ["/students/{id}", "/notices/**"], hosts: ["*.example.org"]}, upstream: none}
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
`)
	for _, tc := range []struct{ method, host, path, route string }{
		{"GET", "api.example.com", "/students/9", "one"},
		{"GET", "API.Example.com:8443", "/students/9", "one"},
		{"POST", "api.example.com", "/students/9", "rest"},
		{"get", "api.example.com", "/students/9", "one"},
		{"GET", "api.example.com", "/students/9/x", "rest"},
		{"GET", "api.example.com", "/students/", "rest"},
		{"GET", "api.example.com", "//students//9/", "one"},
		{"GET", "api.example.com", "/x/../students/9", "one"},
		{"GET", "a.example.org", "/notices", "any-host"},
		{"GET", "a.example.org", "/notices/a/b", "any-host"},
		{"GET", "example.org", "/notices/a", "rest"},
		{"GET", "", "", "rest"},
	} {
		var m Match
		p.Match(&Request{Method: tc.method, Host: tc.host, Path: tc.path}, &m)
		got := ""
		if m.Route != nil {
			got = m.Route.Name
		}
		if got != tc.route {
			t.Errorf("%s %s%s: route %q, want %q", tc.method, tc.host, tc.path, got, tc.route)
		}
	}
}

func TestForbidden(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: a, match: {paths: ["/a"]}, api_key_required: true, upstream: none}
  - {name: b, match: {paths: ["/b"]}, api_key_required: true, upstream: none}
plans:
  - {name: only-a, rate: 5, routes: [a]}
keys:
  - {name: k, plan: only-a, sha256: `+config.HashKey("k-raw")+`}
`)
	var m Match
	p.Match(&Request{Method: "GET", Path: "/a", APIKey: "k-raw"}, &m)
	if m.Forbidden || len(m.Hits) != 1 || m.Plan != "only-a" {
		t.Errorf("covered route: forbidden=%v hits=%d", m.Forbidden, len(m.Hits))
	}
	// Refused requests still pass the limits that need no key, the
	// unknown-key limit per address first; the plan's limit (per key) is
	// not among them.
	p.Match(&Request{Method: "GET", Path: "/b", APIKey: "k-raw", ClientIP: ip("192.0.2.7")}, &m)
	if !m.Forbidden || len(m.Hits) != 1 || m.Limits[0].Name != UnknownKeyLimitName || m.Hits[0].Key != "ip:192.0.2.7" || m.Plan != "" {
		t.Errorf("route outside the plan: forbidden=%v hits=%v plan=%q", m.Forbidden, m.Hits, m.Plan)
	}
	if name, plan, ok := p.KeyName("k-raw"); !ok || name != "k" || plan != "only-a" {
		t.Errorf("KeyName = %q %q %v", name, plan, ok)
	}
}

func TestCountOn(t *testing.T) {
	t.Parallel()
	p := example(t)
	l, ok := p.Limit("login")
	if !ok || !l.Deferred() || !l.Counts(401) || !l.Counts(403) || l.Counts(200) {
		t.Errorf("login limit %+v", l)
	}
	l, _ = p.Limit("per-ip-flood")
	if l.Deferred() || !l.Counts(200) {
		t.Errorf("per-ip-flood counts every status")
	}
}

// TestMatchAllocations is not parallel: AllocsPerRun counts the
// allocations of every goroutine, so it runs while no other test does.
func TestMatchAllocations(t *testing.T) {
	p := example(t)
	req := &Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.7"), APIKey: "key-partner-1"}
	var m Match
	p.Match(req, &m)
	allocs := testing.AllocsPerRun(100, func() { p.Match(req, &m) })
	// One string per hit keyed by the client (the stage and global keys
	// are built once), and the client key.
	if max := float64(len(m.Hits) - 2 + 1); allocs > max {
		t.Errorf("Match allocates %.0f times, want at most %.0f", allocs, max)
	}
}

func BenchmarkMatch(b *testing.B) {
	p := example(b)
	req := &Request{Method: "GET", Path: "/partner/students/9", ClientIP: ip("198.51.100.7"), APIKey: "key-partner-1"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var m Match
		for pb.Next() {
			p.Match(req, &m)
		}
	})
}

func FuzzMatch(f *testing.F) {
	p := example(f)
	f.Add("GET", "api.example.com:80", "/partner/students/9", "key-partner-1", "u", "1.2.3.4")
	f.Add("POST", "[::1]:8080", "//notices/../login/", "", "", "2001:db8::1")
	f.Add("", "", "", "\x00", "|{}%", "")
	f.Fuzz(func(t *testing.T, method, host, path, key, user, addr string) {
		a, _ := netip.ParseAddr(addr)
		h := http.Header{}
		h.Set("X-Tenant", user)
		var m Match
		p.Match(&Request{Method: method, Host: host, Path: path, APIKey: key, User: user, ClientIP: a, Header: h}, &m)
		if len(m.Hits) != len(m.Limits) {
			t.Fatalf("%d hits, %d limits", len(m.Hits), len(m.Limits))
		}
		for i, hit := range m.Hits {
			if m.Limits[i].Key[0].Kind == KeyAPIKey && !strings.HasPrefix(hit.Key, "key:") && !strings.HasPrefix(hit.Key, "keyhash:") {
				t.Fatalf("API key counted as %q", hit.Key)
			}
			if strings.ContainsAny(hit.Key, "{}") {
				t.Fatalf("hash-tag braces in key %q", hit.Key)
			}
		}
	})
}

func TestLeasedConsistency(t *testing.T) {
	p := compile(t, `
routes:
  - {name: a, match: {paths: ["/a"]}, upstream: none}
plans:
  - {name: hot, rate: 1000, consistency: leased}
limits:
  - {name: global, rate: 5000, key: global, scope: global, consistency: leased}
  - {name: exact, rate: 10, key: global, scope: global}
`)
	for name, want := range map[string]floodgate.Consistency{"hot.rate": floodgate.Leased, "global": floodgate.Leased, "exact": floodgate.Exact} {
		l, ok := p.Limit(name)
		if !ok || l.Rule.Consistency() != want {
			t.Errorf("%s: %v", name, l)
		}
	}
}

func TestUnknownKeyLimitFromTheFile(t *testing.T) {
	p := compile(t, `
server:
  unknown_key_limit: {rate: 7, per: 1m, burst: 3}
routes:
  - {name: a, match: {paths: ["/a"]}, upstream: none, api_key_required: true}
`)
	l := p.UnknownKeyLimit()
	if lim := l.Rule.Limit(); lim.Rate != 7 || lim.Per != time.Minute || lim.Burst != 3 || l.Name != UnknownKeyLimitName {
		t.Errorf("unknown-key limit %+v", lim)
	}
	if def := compile(t, "routes: [{name: a, match: {paths: [\"/a\"]}, upstream: none}]\n").UnknownKeyLimit().Rule.Limit(); def.Rate != DefaultUnknownKeyLimit.Rate {
		t.Errorf("default unknown-key limit %+v", def)
	}
}
