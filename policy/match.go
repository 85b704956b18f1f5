package policy

import (
	"path"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/config"
)

// pathPattern is a compiled path pattern: literal segments, "" for one
// segment of any non-empty value, and rest for a final /**.
type pathPattern struct {
	segs []string
	any  []bool
	rest bool
}

func compilePath(p string) pathPattern {
	var pp pathPattern
	p = config.TrimPathPattern(p)
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "**" && i == len(segs)-1 {
			pp.rest = true
			break
		}
		if s == "*" || (strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}")) {
			pp.segs = append(pp.segs, "")
			pp.any = append(pp.any, true)
			continue
		}
		pp.segs = append(pp.segs, s)
		pp.any = append(pp.any, false)
	}
	return pp
}

// match reports whether a cleaned path (starting with /) matches.
func (pp *pathPattern) match(p string) bool {
	rest := p[1:]
	done := false
	for i, want := range pp.segs {
		if done {
			return false
		}
		var seg string
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			seg, rest = rest[:j], rest[j+1:]
		} else {
			seg, rest, done = rest, "", true
		}
		if pp.any[i] {
			if seg == "" {
				return false
			}
		} else if seg != want {
			return false
		}
	}
	if pp.rest {
		return true
	}
	return done || (len(pp.segs) == 0 && rest == "")
}

// cleanPath returns the path as matched: "/" for empty, path parameters
// (";jsessionid=..." in a segment, which servers such as Tomcat drop)
// removed, dot segments and double slashes resolved, and one trailing
// slash removed, so that "/login/", "//login" and "/login;x=1" meet the
// limits of "/login".
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	if strings.IndexByte(p, ';') >= 0 {
		p = stripParams(p)
	}
	if strings.Contains(p, "//") || strings.Contains(p, "/.") {
		p = path.Clean(p)
	}
	if len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// segmentPath returns the path raw (as sent: escaped) as a reader that
// splits a path at its slashes before it decodes each segment reads it
// (net/http's ServeMux for a pattern's wildcards, Express, Rails): every
// escaped slash ("%2F") stays inside its segment, written "%2F", the rest
// is decoded and then cleaned as cleanPath cleans a path. It returns ""
// when raw holds no escaped slash or an escape that does not decode: the
// decoded path is then the only reading.
func segmentPath(raw string) string {
	if !hasEscapedSlash(raw) {
		return ""
	}
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
			return ""
		}
		switch c = unhex(raw[i+1])<<4 | unhex(raw[i+2]); c {
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
		i += 2
	}
	return cleanPath(b.String())
}

// hasEscapedSlash reports whether raw holds "%2F" in either case.
func hasEscapedSlash(raw string) bool {
	for i := strings.IndexByte(raw, '%'); i >= 0 && i+2 < len(raw); {
		if raw[i+1] == '2' && (raw[i+2] == 'F' || raw[i+2] == 'f') {
			return true
		}
		j := strings.IndexByte(raw[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// stripParams removes the ";..." part of every path segment.
func stripParams(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); {
		c := p[i]
		if c != ';' {
			b.WriteByte(c)
			i++
			continue
		}
		for i < len(p) && p[i] != '/' {
			i++
		}
	}
	return b.String()
}

// upper returns an HTTP method in upper case, so that "post" meets the
// limits of POST (some servers accept either).
func upper(m string) string {
	for i := 0; i < len(m); i++ {
		if c := m[i]; c >= 'a' && c <= 'z' {
			return strings.ToUpper(m)
		}
	}
	return m
}

// HostOnly returns a request's host as routes match it: without its port,
// brackets or final dot, in lower case.
func HostOnly(h string) string { return hostOnly(h) }

// hostOnly lower-cases a Host value and removes its port.
func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(h, "]"), "["), ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// matcher is a compiled config.Match.
type matcher struct {
	methods []string
	paths   []pathPattern
	hosts   []string
	stages  []string
	routes  []string
	src     config.Match
}

// compileMatch compiles a match; its paths match as pr reads them
// (config.PathReading.Pattern), as the request's path is read
// (Policy.matchPath): whatever the case (FoldCase), without a final
// ".format" (NoFormat). Methods naming GET also match HEAD (withHead).
func compileMatch(m config.Match, pr config.PathReading) matcher {
	mt := matcher{methods: withHead(m.Methods), hosts: m.Hosts, stages: m.Stages, routes: m.Routes, src: m}
	for _, p := range m.Paths {
		mt.paths = append(mt.paths, compilePath(pr.Pattern(p)))
	}
	return mt
}

// withHead returns methods with HEAD added when they name GET and not
// HEAD: upstreams answer HEAD with their GET handlers (net/http's ServeMux
// pattern "GET /x", Flask, Express) and RFC 9110 §9.3.2 has the answer
// carry GET's status and fields, so a GET limit or route that HEAD escaped
// would let a client read past the limit what GET answers. NGINX's
// limit_except GET allows HEAD too. HEAD alone stays HEAD alone.
func withHead(methods []string) []string {
	if !contains(methods, "GET") || contains(methods, "HEAD") {
		return methods
	}
	return append(slices.Clip(methods), "HEAD")
}

// req is a request reduced to what matchers read.
type req struct {
	method, host, path, stage, route string
	// alt, when set, is another reading of the path (segmentPath): a
	// limit's paths match when either reading matches. Routes are chosen
	// by path alone.
	alt string
}

func (m *matcher) match(r *req) bool {
	if len(m.methods) > 0 && !contains(m.methods, r.method) {
		return false
	}
	if len(m.stages) > 0 && !contains(m.stages, r.stage) {
		return false
	}
	if len(m.routes) > 0 && !contains(m.routes, r.route) {
		return false
	}
	if len(m.hosts) > 0 {
		ok := false
		for _, h := range m.hosts {
			if suffix, wild := strings.CutPrefix(h, "*"); wild {
				ok = len(r.host) > len(suffix) && strings.HasSuffix(r.host, suffix)
			} else {
				ok = r.host == h
			}
			if ok {
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(m.paths) > 0 {
		ok := false
		for i := range m.paths {
			if m.paths[i].match(r.path) || r.alt != "" && m.paths[i].match(r.alt) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
