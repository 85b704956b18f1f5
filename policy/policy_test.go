package policy

import (
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
)

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

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

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
		if rt := p.Route(tc.method, tc.host, tc.path); rt != m.Route {
			t.Errorf("%s %s%s: Route gives %v, Match %v", tc.method, tc.host, tc.path, rt, m.Route)
		}
	}
}

// TestTrailingSlashPattern: a request's path is matched with its trailing
// slash removed, so a pattern written with one ("/accounts/login/", as
// Django spells its paths) loaded and matched no request at all; it is now
// the pattern without it, for limits and routes alike.
func TestTrailingSlashPattern(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: account, match: {paths: ["/accounts/*/"]}, upstream: none}
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: login, rate: 5, per: 1m, match: {paths: ["/accounts/login/"]}}
`)
	for _, path := range []string{"/accounts/login/", "/accounts/login", "//accounts/login//", "/accounts/./login/"} {
		var m Match
		p.Match(&Request{Method: "POST", Path: path}, &m)
		if m.Route == nil || m.Route.Name != "account" || len(m.Limits) != 1 || m.Limits[0].Name != "login" {
			t.Errorf("%s: route %v, limits %v; want the account route and the login limit", path, m.Route, m.Limits)
		}
	}
}

// TestTrailingDotHostPattern: a request's host is matched without its final
// dot ("api.example.com." is the absolute form of the name), so a pattern
// written with one loaded and matched no request; it is now the name
// without it.
func TestTrailingDotHostPattern(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: api, rate: 5, per: 1m, match: {hosts: ["api.example.com."]}}
  - {name: org, rate: 5, per: 1m, match: {hosts: ["*.example.org."]}}
`)
	for _, tc := range []struct{ host, limit string }{
		{"api.example.com", "api"}, {"api.example.com.", "api"}, {"API.example.com.:8443", "api"},
		{"a.example.org", "org"}, {"a.example.org.", "org"},
	} {
		var m Match
		p.Match(&Request{Method: "GET", Host: tc.host, Path: "/"}, &m)
		if len(m.Limits) != 1 || m.Limits[0].Name != tc.limit {
			var got []string
			for _, l := range m.Limits {
				got = append(got, l.Name)
			}
			t.Errorf("%s: limits %v, want [%s]", tc.host, got, tc.limit)
		}
	}
}

// TestFormatSuffixIgnored: with server.format_suffix: ignore, a path and
// the patterns are matched without a final ".format", as Rails routes
// "/login(.:format)"; a segment that is only a suffix is kept.
func TestFormatSuffixIgnored(t *testing.T) {
	t.Parallel()
	p := compile(t, `
server: {format_suffix: ignore, path_matching: case_insensitive}
routes:
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: login, rate: 1, per: 1h, match: {paths: ["/login"]}}
  - {name: feed, rate: 1, per: 1h, match: {paths: ["/feed.xml", "/users/{id}/"]}}
`)
	for _, tc := range []struct{ path, limit string }{
		{"/login", "login"}, {"/Login.JSON", "login"}, {"/login.json/", "login"},
		{"/feed", "feed"}, {"/feed.rss", "feed"}, {"/users/john.doe", "feed"},
		{"/.login", ""}, {"/login.d/x", ""},
	} {
		var m Match
		p.Match(&Request{Method: "GET", Path: tc.path, RawPath: tc.path}, &m)
		got := ""
		if len(m.Limits) == 1 {
			got = m.Limits[0].Name
		}
		if got != tc.limit || len(m.Limits) > 1 {
			t.Errorf("%s: %d limits (%q), want %q", tc.path, len(m.Limits), got, tc.limit)
		}
	}
}

// TestEscapedSlashReadings: a path with "%2F" is matched by a limit that
// either reading matches, decoded ("/users/a/b") or with the slash inside
// its segment ("/users/{id}", as net/http's ServeMux reads it), also with
// case_insensitive paths; a path whose readings choose different routes
// is marked RouteAmbiguous.
func TestEscapedSlashReadings(t *testing.T) {
	t.Parallel()
	for _, fold := range []string{"exact", "case_insensitive"} {
		p := compile(t, `
server: {path_matching: `+fold+`}
routes:
  - {name: admin, match: {paths: ["/admin/{id}"]}, upstream: none}
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: user, rate: 1, per: 1h, match: {paths: ["/Users/{id}"]}}
  - {name: deep, rate: 1, per: 1h, match: {paths: ["/Users/*/b"]}}
`)
		for _, tc := range []struct {
			path, raw, route string
			limits           []string
			ambiguous        bool
		}{
			{"/Users/a/b", "/Users/a%2Fb", "rest", []string{"user", "deep"}, false},
			{"/Users/a/b", "/Users/a%2fb", "rest", []string{"user", "deep"}, false},
			{"/Users/a/b", "", "rest", []string{"deep"}, false},
			{"/Users/a/b", "/Users/a/b", "rest", []string{"deep"}, false},
			{"/Users//b", "/Users/%2Fb", "rest", []string{"user"}, false},
			{"/Users/a/b", "/Users/a%2Fb%zz", "rest", []string{"deep"}, false},
			{"/admin/a/b", "/admin/a%2Fb", "rest", nil, true},
			{"/admin/x", "/admin%2Fx", "admin", nil, true},
			{"/admin//x", "/admin/%2Fx", "admin", nil, false},
		} {
			var m Match
			p.Match(&Request{Method: "GET", Path: tc.path, RawPath: tc.raw}, &m)
			var got []string
			for _, l := range m.Limits {
				got = append(got, l.Name)
			}
			if m.Route == nil || m.Route.Name != tc.route || m.RouteAmbiguous != tc.ambiguous || !slices.Equal(got, tc.limits) {
				t.Errorf("%s: %s (raw %q): route %v, ambiguous %v, limits %v; want %s, %v, %v",
					fold, tc.path, tc.raw, m.Route, m.RouteAmbiguous, got, tc.route, tc.ambiguous, tc.limits)
			}
		}
	}
}

// TestEscapedSlashModes: server.escaped_slash picks the reading of a path
// with "%2F" that routes and matches: segment (the slash inside its
// segment) or decoded alone, both (either for limits, RouteAmbiguous when
// their routes differ), or none under reject, which marks EscapedSlash.
func TestEscapedSlashModes(t *testing.T) {
	t.Parallel()
	type want struct {
		route     string
		limits    []string
		ambiguous bool
		refused   bool
	}
	for _, tc := range []struct {
		path, raw                      string
		both, segment, decoded, reject want
	}{
		{"/api/v4/projects/group/project/issues", "/api/v4/projects/group%2Fproject/issues",
			want{"rest", []string{"issues"}, true, false}, want{"issues", []string{"issues"}, false, false},
			want{"rest", nil, false, false}, want{"rest", nil, false, true}},
		{"/api/v4/projects/x/issues", "/api/v4/projects%2Fx/issues",
			want{"issues", []string{"issues"}, true, false}, want{"rest", nil, false, false},
			want{"issues", []string{"issues"}, false, false}, want{"issues", []string{"issues"}, false, true}},
		{"/users/a/b", "/users/a%2fb",
			want{"rest", []string{"user", "deep"}, false, false}, want{"rest", []string{"user"}, false, false},
			want{"rest", []string{"deep"}, false, false}, want{"rest", []string{"deep"}, false, true}},
		// No escaped slash: every mode reads the path alone.
		{"/users/a b", "/users/a%20b",
			want{"rest", []string{"user"}, false, false}, want{"rest", []string{"user"}, false, false},
			want{"rest", []string{"user"}, false, false}, want{"rest", []string{"user"}, false, false}},
	} {
		for mode, w := range map[string]want{"both": tc.both, "segment": tc.segment, "decoded": tc.decoded, "reject": tc.reject} {
			p := compile(t, `
server: {escaped_slash: `+mode+`}
routes:
  - {name: issues, match: {paths: ["/api/v4/projects/*/issues"]}, upstream: none}
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: issues, rate: 1, per: 1h, match: {paths: ["/api/v4/projects/*/issues"]}}
  - {name: user, rate: 1, per: 1h, match: {paths: ["/users/{id}"]}}
  - {name: deep, rate: 1, per: 1h, match: {paths: ["/users/*/b"]}}
`)
			var m Match
			p.Match(&Request{Method: "GET", Path: tc.path, RawPath: tc.raw}, &m)
			var got []string
			for _, l := range m.Limits {
				got = append(got, l.Name)
			}
			route := "none"
			if m.Route != nil {
				route = m.Route.Name
			}
			if route != w.route || m.RouteAmbiguous != w.ambiguous || m.EscapedSlash != w.refused ||
				!w.refused && !slices.Equal(got, w.limits) {
				t.Errorf("%s: %s: route %s, ambiguous %v, refused %v, limits %v; want %+v",
					mode, tc.raw, route, m.RouteAmbiguous, m.EscapedSlash, got, w)
			}
		}
	}
}

// TestStreamPerMessage: a route's grpc_stream is per_stream unless the
// file says per_message, and Route finds the route of a gRPC method.
func TestStreamPerMessage(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: chat, match: {paths: ["/chat.Chat/Talk"]}, upstream: none, grpc_stream: per_message}
  - {name: feed, match: {paths: ["/feed.Feed/*"]}, upstream: none, grpc_stream: per_stream}
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
`)
	for _, tc := range []struct {
		path, route string
		perMessage  bool
	}{
		{"/chat.Chat/Talk", "chat", true},
		{"/feed.Feed/Watch", "feed", false},
		{"/other.Other/Call", "rest", false},
	} {
		rt := p.Route("POST", "localhost:50051", tc.path)
		if rt == nil || rt.Name != tc.route || rt.StreamPerMessage != tc.perMessage {
			t.Errorf("%s: route %+v, want %s with StreamPerMessage %v", tc.path, rt, tc.route, tc.perMessage)
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
