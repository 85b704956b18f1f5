package policy

import (
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
)

// TestKeyByName: a request that names its key (as an access log shows it)
// meets the same limits, under the same counter keys, as one carrying the
// raw key; an unknown key is counted by the same hash either way.
func TestKeyByName(t *testing.T) {
	p := example(t)
	ip := netip.MustParseAddr("203.0.113.7")
	for _, tc := range []struct{ raw, path string }{
		{"key-partner-1", "/partner/students/9"},
		{"key-trial", "/partner/students/9"},
		{"key-nobody", "/students/9"},
		{"key-nobody", "/partner/students/9"},
	} {
		var byRaw, byName Match
		p.Match(&Request{Method: "GET", Path: tc.path, ClientIP: ip, APIKey: tc.raw}, &byRaw)
		if byRaw.KeyID == "" || strings.Contains(byRaw.KeyID, tc.raw) {
			t.Fatalf("%s: KeyID %q", tc.raw, byRaw.KeyID)
		}
		p.Match(&Request{Method: "GET", Path: tc.path, ClientIP: ip, KeyName: byRaw.KeyID}, &byName)
		if byRaw.Forbidden != byName.Forbidden || byRaw.KeyID != byName.KeyID || byRaw.Plan != byName.Plan ||
			!slices.Equal(byRaw.Hits, byName.Hits) {
			t.Errorf("%s %s: by raw key %+v\nby name %+v", tc.raw, tc.path, byRaw, byName)
		}
	}
	var m Match
	p.Match(&Request{Method: "GET", Path: "/partner/students/9", KeyName: "partner-1"}, &m)
	if m.KeyName != "partner-1" || m.Plan != "partner-basic" || m.Forbidden || len(m.Hits) == 0 || m.Hits[0].Key != "key:partner-1" {
		t.Errorf("by name: %+v", m)
	}
	// A name the policy does not know is an unknown key: 403 where a key
	// is required, counted by a hash elsewhere.
	p.Match(&Request{Method: "GET", Path: "/partner/students/9", KeyName: "retired"}, &m)
	if !m.Forbidden || !strings.HasPrefix(m.KeyID, "?") || m.KeyName != "" {
		t.Errorf("unknown name: %+v", m)
	}
	// The key's name is known even when its plan does not cover the
	// route.
	q := compile(t, `
routes:
  - {name: a, match: {paths: ["/a"]}, api_key_required: true, upstream: none}
  - {name: b, match: {paths: ["/b"]}, api_key_required: true, upstream: none}
plans:
  - {name: only-a, rate: 5, routes: [a]}
keys:
  - {name: k, plan: only-a, sha256: `+config.HashKey("k-raw")+`}
`)
	q.Match(&Request{Method: "GET", Path: "/b", APIKey: "k-raw"}, &m)
	if !m.Forbidden || m.KeyID != "k" {
		t.Errorf("uncovered route: %+v", m)
	}
}

const explainPolicy = `
routes:
  - {name: students, match: {methods: [GET], paths: ["/students/{id}"]}, stage: dev, upstream: none}
  - {name: partner, match: {methods: [GET], paths: ["/partner/**"]}, stage: prod, api_key_required: true, upstream: none}
  - {name: login, match: {methods: [POST], paths: ["/login"]}, stage: prod, upstream: none}
  - {name: api, match: {hosts: [api.example.com], paths: ["/v2/**"]}, upstream: none}
stages:
  - {name: dev, rate: 5}
  - {name: prod, rate: 100}
plans:
  - {name: basic, rate: 2, routes: [partner]}
  - {name: gold, rate: 20}
keys:
  - {name: k1, plan: basic, sha256: ` + "%s" + `}
  - {name: k2, plan: gold, sha256: ` + "%s" + `}
limits:
  - {name: login, algorithm: sliding_log, limit: 5, window: 1m, match: {methods: [POST], paths: ["/login"]}, key: client_ip, count_on: [401], scope: method}
  - {name: per-user, rate: 5, match: {routes: [login, students]}, key: user}
  - {name: per-tenant, rate: 5, match: {stages: [prod]}, key: "header:X-Tenant", scope: stage}
  - {name: v2, rate: 5, match: {hosts: [api.example.com], paths: ["/v2/**"]}, key: client_ip}
  - {name: per-ip-trial, rate: 20, key: client_ip, shadow: true, scope: global}
account: {rate: 1000}
`

func explainFixture(t *testing.T) *Policy {
	return compile(t, strings.Replace(strings.Replace(explainPolicy, "%s", config.HashKey("raw-1"), 1), "%s", config.HashKey("raw-2"), 1))
}

// TestExplainReasons covers every reason a limit is skipped or applies.
func TestExplainReasons(t *testing.T) {
	p := explainFixture(t)
	ip := netip.MustParseAddr("198.51.100.4")
	type want struct {
		limit   string
		matched bool
		reason  string // a substring
		key     string
	}
	for _, tc := range []struct {
		name      string
		r         Request
		forbidden string
		want      []want
	}{
		{"student, no user", Request{Method: "GET", Path: "/students/9", ClientIP: ip}, "", []want{
			{"basic.rate", false, "no API key", ""},
			{"login", false, "method GET is not POST", ""},
			{"per-user", false, "has no user", ""},
			{"v2", false, "has no host (the limit is for api.example.com)", ""},
			{"per-tenant", false, `stage "dev" is not prod`, ""},
			{"stage.dev", true, `on stage "dev"`, "stage:dev"},
			{"stage.prod", false, `on stage "dev"`, ""},
			{UnknownKeyLimitName, false, "counts only requests refused", ""},
			{"per-ip-trial", true, "shadow", "ip:198.51.100.4"},
			{"account", true, "every request", "global"},
		}},
		{"login with user and tenant", Request{Method: "POST", Path: "/login", ClientIP: ip, User: "ana",
			Header: http.Header{"X-Tenant": {"t1"}}}, "", []want{
			{"login", true, "charged after the response", "ip:198.51.100.4"},
			{"per-user", true, "route=login,students", "user:ana"},
			{"per-tenant", true, "stage=prod", "h:X-Tenant=t1"},
			{"stage.prod", true, "", "stage:prod"},
		}},
		{"login, token not verified", Request{Method: "POST", Path: "/login", ClientIP: ip, UserPending: true}, "", []want{
			{"per-user", false, "not known yet", ""},
			{"per-tenant", false, "no X-Tenant header", ""},
		}},
		{"partner without key", Request{Method: "GET", Path: "/partner/x", ClientIP: ip}, "has none", []want{
			{"basic.rate", false, "not checked", ""},
			{UnknownKeyLimitName, true, "refused for its API key", "ip:198.51.100.4"},
			{"account", true, "every request", "global"},
		}},
		{"partner with unknown key", Request{Method: "GET", Path: "/partner/x", ClientIP: ip, APIKey: "nope"}, "is not configured", nil},
		{"partner, basic key", Request{Method: "GET", Path: "/partner/x", ClientIP: ip, APIKey: "raw-1"}, "", []want{
			{"basic.rate", true, `key "k1" is in plan "basic"`, "key:k1"},
			{"gold.rate", false, `key "k1" is in plan "basic"`, ""},
		}},
		{"basic key off its routes", Request{Method: "GET", Path: "/students/1", ClientIP: ip, APIKey: "raw-1"}, "", []want{
			{"basic.rate", false, `plan "basic" does not cover route "students"`, ""},
		}},
		{"basic key, no route", Request{Method: "GET", Path: "/nowhere", ClientIP: ip, APIKey: "raw-1"}, "", []want{
			{"basic.rate", false, "no route matched", ""},
			{"per-user", false, "no route matched (the limit is for route login or students)", ""},
			{"per-tenant", false, "no stage", ""},
		}},
		{"gold key anywhere, wrong host", Request{Method: "GET", Host: "www.example.com", Path: "/v2/a", ClientIP: ip, KeyName: "k2"}, "", []want{
			{"gold.rate", true, "", "key:k2"},
			{"v2", false, `host "www.example.com" is not api.example.com`, ""},
		}},
		{"v2 on its host", Request{Method: "GET", Host: "API.example.com:443", Path: "/v2/a", ClientIP: ip}, "", []want{
			{"v2", true, "", "ip:198.51.100.4"},
		}},
		{"v2 path elsewhere", Request{Method: "GET", Host: "api.example.com", Path: "/v1/a", ClientIP: ip}, "", []want{
			{"v2", false, `path "/v1/a" does not match /v2/**`, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Match
			e := p.Explain(&tc.r, &m)
			if len(e.Limits) != len(p.Limits()) {
				t.Fatalf("%d limits explained, policy has %d", len(e.Limits), len(p.Limits()))
			}
			if tc.forbidden == "" && e.Forbidden != "" || !strings.Contains(e.Forbidden, tc.forbidden) {
				t.Errorf("forbidden %q, want %q", e.Forbidden, tc.forbidden)
			}
			// The matched limits are exactly Match's, in its order.
			var mm Match
			p.Match(&tc.r, &mm)
			var hits []string
			for i, lm := range e.Limits {
				if lm.Limit != p.Limits()[i] {
					t.Fatalf("limit %d is %s, want evaluation order", i, lm.Limit.Name)
				}
				if lm.Matched {
					hits = append(hits, lm.Limit.Name+"="+lm.Key)
					if mm.Hits[lm.Hit].Key != lm.Key || mm.Limits[lm.Hit] != lm.Limit {
						t.Errorf("%s: hit %d is not Match's", lm.Limit.Name, lm.Hit)
					}
				}
				if lm.Reason == "" {
					t.Errorf("%s: no reason", lm.Limit.Name)
				}
			}
			if len(hits) != len(mm.Hits) {
				t.Errorf("explained hits %v, Match has %d", hits, len(mm.Hits))
			}
			for _, w := range tc.want {
				var lm *LimitMatch
				for i := range e.Limits {
					if e.Limits[i].Limit.Name == w.limit {
						lm = &e.Limits[i]
					}
				}
				if lm == nil {
					t.Fatalf("no limit %s", w.limit)
				}
				if lm.Matched != w.matched || !strings.Contains(lm.Reason, w.reason) || lm.Key != w.key {
					t.Errorf("%s: matched=%v key=%q reason %q; want %v %q %q", w.limit, lm.Matched, lm.Key, lm.Reason, w.matched, w.key, w.reason)
				}
			}
		})
	}
}

// TestExplainReadsThePathAsMatch: the reason Explain gives for a limit
// that does not apply is about the path as Match reads it (lower-cased,
// without its format suffix, with each reading of an escaped slash), so
// a limit whose path the request meets is said to miss for the header it
// lacks, never for a path it matches, and one whose path it misses says
// so.
func TestExplainReadsThePathAsMatch(t *testing.T) {
	t.Parallel()
	const limits = `
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: orders, rate: 5, key: "header:X-Tenant", match: {paths: ["/api/orders"]}}
  - {name: file, rate: 5, key: "header:X-Tenant", match: {paths: ["/files/{id}"]}}
  - {name: deep, rate: 5, key: "header:X-Tenant", match: {paths: ["/files/*/b"]}}
`
	type want struct{ limit, reason, missing string }
	for _, tc := range []struct {
		server    string
		path, raw string
		tenant    bool
		want      want
	}{
		{"path_matching: case_insensitive", "/API/Orders", "", false, want{"orders", "no X-Tenant header", "header:X-Tenant"}},
		{"format_suffix: ignore", "/api/orders.json", "", false, want{"orders", "no X-Tenant header", "header:X-Tenant"}},
		{"format_suffix: ignore, path_matching: case_insensitive", "/API/orders.JSON/", "", false, want{"orders", "no X-Tenant header", "header:X-Tenant"}},
		{"escaped_slash: both", "/files/a/b", "/files/a%2Fb", false, want{"file", "no X-Tenant header", "header:X-Tenant"}},
		{"escaped_slash: segment", "/files/a/b", "/files/a%2Fb", false, want{"file", "no X-Tenant header", "header:X-Tenant"}},
		{"escaped_slash: segment", "/files/a/b", "/files/a%2Fb", true, want{"deep", `path "/files/a%2Fb" does not match /files/*/b`, ""}},
		{"escaped_slash: decoded", "/files/a/b", "/files/a%2Fb", true, want{"file", `path "/files/a/b" does not match /files/{id}`, ""}},
		{"escaped_slash: reject", "/files/a/b", "/files/a%2Fb", false, want{"deep", "no X-Tenant header", "header:X-Tenant"}},
	} {
		p := compile(t, "server: {"+tc.server+"}\n"+limits)
		h := http.Header{}
		if tc.tenant {
			h.Set("X-Tenant", "t1")
		}
		r := Request{Method: "GET", Path: tc.path, RawPath: tc.raw, ClientIP: ip("198.51.100.7"), Header: h}
		var m Match
		e := p.Explain(&r, &m)
		for _, lm := range e.Limits {
			if lm.Limit.Name != tc.want.limit {
				continue
			}
			if lm.Matched || !strings.Contains(lm.Reason, tc.want.reason) || lm.Missing != tc.want.missing {
				t.Errorf("%s: %s (raw %q): %s matched=%v reason %q missing %q; want reason %q missing %q",
					tc.server, tc.path, tc.raw, lm.Limit.Name, lm.Matched, lm.Reason, lm.Missing, tc.want.reason, tc.want.missing)
			}
		}
	}
}

// TestExplainAgreesWithMatch: with random files of routes and limits (the
// generators of TestIndexMatchesAsTheScan, under every escaped_slash
// setting) and random requests near their patterns, the limits Explain
// says apply are Match's and the scan's, in Match's order, and every limit
// that does not apply is given the reason the request as Match reads it
// gives: the first condition of its match it misses, or the part of its
// key it lacks.
func TestExplainAgreesWithMatch(t *testing.T) {
	t.Parallel()
	modes := []string{config.EscapedSlashBoth, config.EscapedSlashSegment, config.EscapedSlashDecoded, config.EscapedSlashReject}
	for seed := range uint64(120) {
		rnd := rand.New(rand.NewPCG(seed, 63))
		f := randomFile(t, rnd)
		f.Server.EscapedSlash = modes[seed%uint64(len(modes))]
		p, err := Compile(f, nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		var m, em Match
		for range 200 {
			r := randomRequest(rnd)
			if rnd.IntN(2) == 0 {
				r.Header = http.Header{"X-Tenant": {"t1"}}
			}
			p.Match(r, &m)
			e := p.Explain(r, &em)
			_, _, scanned := scanMatch(p, r)
			ref, _, _ := scanReq(p, r)
			applies := make([]*Limit, len(em.Limits))
			n := 0
			for i, lm := range e.Limits {
				if lm.Limit != p.Limits()[i] {
					t.Fatalf("seed %d: limit %d is %s, want evaluation order", seed, i, lm.Limit.Name)
				}
				if lm.Matched {
					applies[lm.Hit] = lm.Limit
					n++
					continue
				}
				l := lm.Limit
				if l.Scope == ScopePlan || l.Stage != "" || l == p.unknownKey {
					continue
				}
				want := l.match.why(&ref)
				if want == "" {
					want, _ = missingPart(l, r, &m)
				}
				if lm.Reason != want {
					t.Fatalf("seed %d (%s): %s %s %q (raw %q): %s: reason %q; the request as Match reads it gives %q",
						seed, f.Server.EscapedSlash, r.Method, r.Host, r.Path, r.RawPath, l.Name, lm.Reason, want)
				}
			}
			if n != len(em.Limits) || !slices.Equal(applies, m.Limits) || !slices.Equal(m.Limits, scanned) ||
				em.Route != m.Route || !slices.Equal(em.Hits, m.Hits) {
				t.Fatalf("seed %d (%s): %s %s %q (raw %q): Explain applies %v (route %v), Match %v (route %v), the scan %v",
					seed, f.Server.EscapedSlash, r.Method, r.Host, r.Path, r.RawPath, names(applies), em.Route, names(m.Limits), m.Route, names(scanned))
			}
		}
	}
}
