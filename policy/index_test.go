package policy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
)

// scanRoute is the reference for Policy.route: the first route, in
// order, whose matcher matches rq.
func scanRoute(p *Policy, rq *req) *Route {
	for _, rt := range p.routes {
		if rt.match.match(rq) {
			return rt
		}
	}
	return nil
}

// scanMatch is the reference for the limits Policy.Match finds: it reads
// the request as Match does and looks at every route and limit, in order.
// It returns the route, whether the two readings of the path choose
// different routes, and the method, route, stage, stage default and
// global limits (then the account limit) that apply.
func scanMatch(p *Policy, r *Request) (*Route, bool, []*Limit) {
	rq, route, ambiguous := scanReq(p, r)
	stage := rq.stage
	var limits []*Limit
	for si := range p.scoped {
		for _, l := range p.scoped[si] {
			if l.match.match(&rq) {
				limits = append(limits, l)
			}
		}
		if si == 2 && stage != "" {
			if l := p.stages[stage]; l != nil {
				limits = append(limits, l)
			}
		}
	}
	if p.account != nil {
		limits = append(limits, p.account)
	}
	return route, ambiguous, limits
}

// scanReq reads r as scanMatch does: the path (the escaped slashes kept
// in their segments with escaped_slash: segment) and, with both, its other
// reading, the route, the stage, and whether the readings choose different
// routes.
func scanReq(p *Policy, r *Request) (req, *Route, bool) {
	rq := p.req(r.Method, r.Host, r.Path)
	route := scanRoute(p, &rq)
	ambiguous := false
	if r.RawPath != "" && (p.slash == config.EscapedSlashBoth || p.slash == config.EscapedSlashSegment) {
		if alt := segmentPath(r.RawPath); alt != "" {
			if alt = p.matchPath(alt); alt != rq.path && p.slash == config.EscapedSlashSegment {
				rq.path = alt
				route = scanRoute(p, &rq)
			} else if alt != rq.path {
				arq := rq
				arq.path = alt
				ambiguous = scanRoute(p, &arq) != route
				rq.alt = alt
			}
		}
	}
	rq.stage = r.Stage
	if route != nil {
		rq.route = route.Name
		if rq.stage == "" {
			rq.stage = route.Stage
		}
	}
	return rq, route, ambiguous
}

// Pattern segments: literals (one with an escaped slash, some with a
// format suffix, some in upper case), "*", "{id}".
var indexSegs = []string{"a", "b", "users", "v1", "Users", "A", "feed.xml", "x.json", ".env", "a%2Fb", "*", "{id}", "*", "{id}"}

func randomPattern(rnd *rand.Rand) string {
	if rnd.IntN(12) == 0 {
		return "/"
	}
	var b strings.Builder
	for range 1 + rnd.IntN(4) {
		b.WriteString("/" + indexSegs[rnd.IntN(len(indexSegs))])
	}
	switch rnd.IntN(6) {
	case 0:
		b.WriteString("/**")
	case 1:
		b.WriteString("/")
	}
	return b.String()
}

func randomList(rnd *rand.Rand, from []string, quote bool) string {
	var parts []string
	for _, s := range from {
		if rnd.IntN(3) == 0 {
			if quote {
				s = fmt.Sprintf("%q", s)
			}
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// randomMatch returns the match block of a route or limit: paths (none
// half of the time, for a limit), methods, hosts, and for a limit routes
// and stages.
func randomMatch(rnd *rand.Rand, routes []string, limit bool) string {
	var parts []string
	if !limit || rnd.IntN(2) == 0 {
		var paths []string
		for range 1 + rnd.IntN(3) {
			paths = append(paths, fmt.Sprintf("%q", randomPattern(rnd)))
		}
		parts = append(parts, "paths: ["+strings.Join(paths, ", ")+"]")
	}
	if rnd.IntN(3) == 0 {
		if l := randomList(rnd, []string{"GET", "POST", "PUT"}, false); l != "" {
			parts = append(parts, "methods: "+l)
		}
	}
	if rnd.IntN(4) == 0 {
		if l := randomList(rnd, []string{"api.example.com", "*.example.com", "other.org."}, true); l != "" {
			parts = append(parts, "hosts: "+l)
		}
	}
	if limit && rnd.IntN(3) == 0 {
		if l := randomList(rnd, routes, false); l != "" {
			parts = append(parts, "routes: "+l)
		}
	}
	if limit && rnd.IntN(6) == 0 {
		if l := randomList(rnd, []string{"dev", "prod"}, false); l != "" {
			parts = append(parts, "stages: "+l)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// randomFile returns a valid file of random routes and limits.
func randomFile(t *testing.T, rnd *rand.Rand) *config.File {
	for {
		var b strings.Builder
		fmt.Fprintf(&b, "server: {path_matching: %s, format_suffix: %s}\n",
			[]string{"exact", "case_insensitive"}[rnd.IntN(2)], []string{"keep", "ignore"}[rnd.IntN(2)])
		b.WriteString("stages:\n  - {name: dev, rate: 5}\n  - {name: prod, rate: 100}\n")
		nr := 1 + rnd.IntN(30)
		var routes []string
		b.WriteString("routes:\n")
		for i := range nr {
			routes = append(routes, fmt.Sprintf("r%d", i))
			stage := ""
			if rnd.IntN(3) == 0 {
				stage = ", stage: " + []string{"dev", "prod"}[rnd.IntN(2)]
			}
			fmt.Fprintf(&b, "  - {name: r%d, match: %s, upstream: none%s}\n", i, randomMatch(rnd, nil, false), stage)
		}
		b.WriteString("limits:\n")
		for i := range rnd.IntN(40) {
			fmt.Fprintf(&b, "  - {name: l%d, rate: 5, key: %s, scope: %s, match: %s}\n", i,
				[]string{"client_ip", "global", "route", "stage"}[rnd.IntN(4)],
				[]string{"method", "route", "stage", "global"}[rnd.IntN(4)], randomMatch(rnd, routes, true))
		}
		if rnd.IntN(2) == 0 {
			b.WriteString("account: {rate: 1000}\n")
		}
		f, err := config.Parse("random.yaml", []byte(b.String()))
		if err == nil {
			return f
		}
		t.Logf("regenerating: %v", err)
	}
}

// pathSegs are what random paths are made of: the patterns' literals,
// their case and format variants, other values, empty segments, dot
// segments and path parameters.
var pathSegs = []string{"a", "b", "users", "v1", "Users", "A", "USERS", "feed.xml", "feed", "feed.rss", "x.json", "x",
	"a.JSON", ".env", "a%2Fb", "zz", "42", "", ".", "..", "a;x=1", "**", "*", "{id}"}

// randomRequest returns a request near the patterns: its path made of
// their segments and others, escaped slashes in its raw form.
func randomRequest(rnd *rand.Rand) *Request {
	var raw strings.Builder
	for range rnd.IntN(6) {
		raw.WriteString("/" + pathSegs[rnd.IntN(len(pathSegs))])
		if rnd.IntN(8) == 0 {
			raw.WriteString([]string{"%2F", "%2f", "%2Fa"}[rnd.IntN(3)])
		}
	}
	if rnd.IntN(5) == 0 {
		raw.WriteString("/")
	}
	rawPath := raw.String()
	r := &Request{
		Method:   []string{"GET", "POST", "put", "DELETE"}[rnd.IntN(4)],
		Host:     []string{"", "api.example.com", "x.API.example.com:8080", "other.org.", "example.com"}[rnd.IntN(5)],
		Path:     strings.NewReplacer("%2F", "/", "%2f", "/").Replace(rawPath),
		ClientIP: ip("198.51.100.7"),
		Header:   http.Header{},
	}
	if rnd.IntN(4) != 0 {
		r.RawPath = rawPath
	}
	if rnd.IntN(6) == 0 {
		r.Stage = []string{"dev", "prod", "other"}[rnd.IntN(3)]
	}
	return r
}

// TestIndexMatchesAsTheScan: with random files of routes and limits
// (literal, "*", "{id}" and final "**" segments, escaped slashes, format
// suffixes, hosts, methods, routes, stages; paths matched exactly or
// whatever their case, with or without their format suffix) and random
// requests near their patterns, the index finds the same route, the same
// ambiguity and the same limits in the same order as a scan of every
// route and limit does.
func TestIndexMatchesAsTheScan(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		rnd := rand.New(rand.NewPCG(seed, 62))
		f := randomFile(t, rnd)
		p, err := Compile(f, nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		var m Match
		for range 300 {
			r := randomRequest(rnd)
			route, ambiguous, limits := scanMatch(p, r)
			p.Match(r, &m)
			if m.Route != route || m.RouteAmbiguous != ambiguous || !slices.Equal(m.Limits, limits) {
				t.Fatalf("seed %d: %s %s %q (raw %q, stage %q): route %v, ambiguous %v, limits %v; the scan finds %v, %v, %v",
					seed, r.Method, r.Host, r.Path, r.RawPath, r.Stage, m.Route, m.RouteAmbiguous, names(m.Limits), route, ambiguous, names(limits))
			}
			rq := p.req(r.Method, r.Host, r.Path)
			if got, want := p.Route(r.Method, r.Host, r.Path), scanRoute(p, &rq); got != want {
				t.Fatalf("seed %d: Route(%s, %s, %q) is %v; the scan finds %v", seed, r.Method, r.Host, r.Path, got, want)
			}
		}
	}
}

func names(limits []*Limit) []string {
	var s []string
	for _, l := range limits {
		s = append(s, l.Name)
	}
	return s
}

// TestIndexLooksOnlyAtCandidates: in a file of 10,000 routes and 10,000
// limits, one per endpoint, the index gives a request on one endpoint
// its route's and its limits' few candidates (its own, the catch-alls),
// not every one, and a request on no endpoint only the catch-alls.
func TestIndexLooksOnlyAtCandidates(t *testing.T) {
	t.Parallel()
	p := compile(t, manyRoutes(10000))
	for _, tc := range []struct {
		path, route string
		limits      int
	}{{"/svc5000/items/42", "r5000", 2}, {"/svc5001/items/42/x", "r5001", 2}, {"/none/items/42", "rest", 1}, {"/", "rest", 1}} {
		rq := p.req("POST", "", tc.path)
		rt := p.Route("POST", "", tc.path)
		if rt == nil || rt.Name != tc.route {
			t.Fatalf("%s: route %v, want %s", tc.path, rt, tc.route)
		}
		cand := p.limitIndex.candidates(nil, rq.path, "", rt.Name)
		if len(cand) > 3 {
			t.Errorf("%s: %d candidate limits of %d", tc.path, len(cand), len(p.flat))
		}
		var m Match
		p.Match(&Request{Method: "POST", Path: tc.path, ClientIP: ip("198.51.100.7")}, &m)
		if len(m.Limits) != tc.limits {
			t.Errorf("%s: limits %v, want %d", tc.path, names(m.Limits), tc.limits)
		}
	}
}

// TestIndexMatchAllocatesNothing is not parallel: AllocsPerRun counts the
// allocations of every goroutine. Matching a request of a known client on
// a file of 1,000 routes and limits allocates nothing once its counter
// keys were built.
func TestIndexMatchAllocatesNothing(t *testing.T) {
	p := compile(t, manyRoutes(1000))
	r := &Request{Method: "POST", Path: "/svc500/items/42", RawPath: "/svc500/items/42", ClientKey: "198.51.100.7"}
	var m Match
	p.Match(r, &m)
	if allocs := testing.AllocsPerRun(100, func() { p.Match(r, &m) }); allocs != 0 || len(m.Limits) != 2 {
		t.Errorf("Match allocates %.0f times (limits %v)", allocs, names(m.Limits))
	}
}
