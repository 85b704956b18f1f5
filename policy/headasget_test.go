package policy

import (
	"strings"
	"testing"
)

// TestGetMatchesHead: a route or limit whose match names GET matches HEAD
// (in any case) as well, in Match and in Explain, as upstreams answer HEAD
// with their GET handlers; one naming HEAD alone still matches HEAD alone,
// and POST matches neither. Before 2026-12-06 HEAD /lookup took the
// catch-all route and HEAD /exists missed the GET limit.
func TestGetMatchesHead(t *testing.T) {
	p := compile(t, `
routes:
  - {name: lookup, match: {methods: [GET], paths: ["/lookup"]}, upstream: none}
  - {name: probe, match: {methods: [HEAD], paths: ["/probe"]}, upstream: none}
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: exists, rate: 2, match: {methods: [GET], paths: ["/exists"]}, key: global}
  - {name: heads, rate: 2, match: {methods: [HEAD]}, key: global}
`)
	for _, tc := range []struct {
		method, path, route string
		limits              []string
	}{
		{"GET", "/lookup", "lookup", nil},
		{"HEAD", "/lookup", "lookup", []string{"heads"}},
		{"head", "/lookup", "lookup", []string{"heads"}},
		{"POST", "/lookup", "rest", nil},
		{"GET", "/probe", "rest", nil},
		{"HEAD", "/probe", "probe", []string{"heads"}},
		{"GET", "/exists", "rest", []string{"exists"}},
		{"HEAD", "/exists", "rest", []string{"exists", "heads"}},
		{"POST", "/exists", "rest", nil},
	} {
		var m, em Match
		p.Match(&Request{Method: tc.method, Path: tc.path}, &m)
		e := p.Explain(&Request{Method: tc.method, Path: tc.path}, &em)
		var got, explained []string
		for _, l := range m.Limits {
			got = append(got, l.Name)
		}
		for _, lm := range e.Limits {
			if lm.Matched {
				explained = append(explained, lm.Limit.Name)
			}
		}
		route := ""
		if m.Route != nil {
			route = m.Route.Name
		}
		if route != tc.route || strings.Join(got, ",") != strings.Join(tc.limits, ",") ||
			em.Route != m.Route || strings.Join(explained, ",") != strings.Join(tc.limits, ",") {
			t.Errorf("%s %s: route %q, limits %v, explained %v; want route %q, limits %v",
				tc.method, tc.path, route, got, explained, tc.route, tc.limits)
		}
	}
	var em Match
	for _, lm := range p.Explain(&Request{Method: "POST", Path: "/exists"}, &em).Limits {
		if lm.Limit.Name == "exists" && lm.Reason != "method POST is not GET or HEAD" {
			t.Errorf("POST /exists: the exists limit's reason %q", lm.Reason)
		}
	}
}
