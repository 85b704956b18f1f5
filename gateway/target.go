package gateway

import (
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
)

// MethodOverride says what the gateway does with the headers through which
// some frameworks let a client change a request's method
// (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override): left as they
// are, a POST-only limit would miss a GET that the upstream turns into a
// POST.
type MethodOverride uint8

// Method override policies. The zero value strips the headers.
const (
	// OverrideStrip removes the headers before matching and forwarding.
	OverrideStrip MethodOverride = iota
	// OverrideReject answers 400 to a request that carries one.
	OverrideReject
	// OverrideHonor matches the request with the method the header names
	// and forwards the header, for upstreams that honour it.
	OverrideHonor
)

// methodOverrideHeaders are the headers of MethodOverride, canonical.
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// MethodOverrideFields returns the names of the fields in which a client
// may name another method than its request's (canonical form), for a
// front end that reads its requests' fields itself (package grpcguard).
func MethodOverrideFields() []string { return slices.Clone(methodOverrideHeaders) }

// badTarget returns why a request's target is refused, or "": what no sane
// upstream should receive and what would let a request dodge a route's
// limit when the upstream normalises it. The path is read decoded (so %00
// and %5C count as NUL and backslash).
func badTarget(p string) string {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 || c == 0x7f:
			return "control character in the path"
		case c == '\\':
			return "backslash in the path"
		}
	}
	if strings.Contains(p, "..;") {
		return `"..;" in the path`
	}
	if paramBeforeDotDot(p) {
		return `a path parameter on an empty or "." segment before ".."`
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg != "" && (isSpace(seg[0]) || isSpace(seg[len(seg)-1])) {
			return "a path segment starts or ends with white space"
		}
	}
	return ""
}

// paramBeforeDotDot reports whether the path p (decoded) has a segment that
// is nothing or "." but for a path parameter ("/;x", "/.;x") and a ".."
// segment after it. The gateway removes the parameter, and with it the
// segment, before it resolves the dot segments (as Tomcat does); NGINX,
// net/http and fasthttp keep such a segment as one of its own, so the ".."
// would take away another segment on one side than on the other:
// "/admin/;x/../secret" would be limited as "/secret" and served as
// "/admin/secret". A path parameter with no ".." after it moves nothing
// ("/app/;jsessionid=1" is served).
func paramBeforeDotDot(p string) bool {
	if strings.IndexByte(p, ';') < 0 {
		return false
	}
	seen := false
	for seg := range strings.SplitSeq(p, "/") {
		if i := strings.IndexByte(seg, ';'); i >= 0 && (i == 0 || seg[:i] == ".") {
			seen = true
		} else if seen && seg == ".." {
			return true
		}
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\v' || c == '\f' }

// methodOverride applies the gateway's policy to the method override
// headers of the request x carries (r its view); it returns the reason to
// refuse it, or "". Every line of each field counts, empty ones too: an
// upstream may read any of them (the last, often), so a field is stripped
// whatever its lines hold, refused when any line names a method, and
// honoured only when all that name one name the same.
func (g *Gateway) methodOverride(x Exchange, r *Request) string {
	if r.Header == nil || r.NoOverride {
		return ""
	}
	hh, isHTTP := r.Header.(http.Header)
	method := ""
	for _, h := range methodOverrideHeaders {
		var vs []string
		if isHTTP {
			// net/http's fields are keyed canonically: a lookup need not
			// canonicalise the name again.
			vs = hh[h]
		} else {
			vs = r.Header.Values(h)
		}
		if len(vs) == 0 {
			continue
		}
		switch g.override {
		case OverrideReject:
			for _, v := range vs {
				if strings.TrimSpace(v) != "" {
					return "method override headers are not accepted"
				}
			}
			x.DelHeader(h) // empty lines: no method, nothing to pass on
		case OverrideHonor:
			for _, v := range vs {
				m := upperMethod(strings.TrimSpace(v))
				switch {
				case m == "":
				case method == "":
					method = m
				case m != method:
					return "method override headers name more than one method"
				}
			}
		default:
			x.DelHeader(h)
		}
	}
	if method != "" {
		r.Method = method
	}
	return ""
}

// upperMethod returns a method in upper case, without allocating when it
// is already.
func upperMethod(m string) string {
	for i := 0; i < len(m); i++ {
		if c := m[i]; c >= 'a' && c <= 'z' {
			return strings.ToUpper(m)
		}
	}
	return m
}

// ResolveDotSegments returns the path p of a request target (as sent,
// escaped, without its query) with its dot segments resolved as the
// gateway resolves them to route and limit the request: a segment that is
// "." or ".." (escaped or not: "%2e", ".%2E") is removed, or removes the
// one before it, and empty segments go with them, as path.Clean reads the
// decoded path. Every other segment is kept as it was sent. It returns p
// and false when p holds no dot segment. A path that also holds an escaped
// slash ("%2F") is resolved only when both readings of it agree (the slash
// decoded, or kept inside its segment): when its dot segments are
// segments of their own whichever way "%2F" is read
// (/admin/../public/x%2Fy), and decoding the result leaves no dot segment;
// such a path is resolved alike under every server.escaped_slash, so the
// result is what was routed and limited, the escaped slash kept. Otherwise
// which segment a ".." removes depends on the reading: Preflight refuses
// such a target (ambiguousDots), and p goes back unchanged. Both engines
// forward the path it returns, so that an upstream that does not resolve
// dot segments itself is asked for the path the gateway limited.
func ResolveDotSegments(p string) (string, bool) {
	out, found := resolveDots(p)
	if !found || hasEscapedSlash(p) && !readingsAgree(p, out) {
		return p, false
	}
	return out, true
}

// resolveDots returns the path p (escaped) with its dot segments resolved
// segment by segment, an escaped slash kept inside its segment, and
// whether it held any; p and false when it held none.
func resolveDots(p string) (string, bool) {
	if !strings.Contains(p, "/.") && !strings.Contains(p, "/%2e") && !strings.Contains(p, "/%2E") {
		return p, false
	}
	segs := strings.Split(p, "/")
	found := false
	for _, s := range segs {
		if dotSegment(s) != 0 {
			found = true
			break
		}
	}
	if !found {
		return p, false
	}
	kept := make([]string, 0, len(segs))
	for _, s := range segs {
		switch dotSegment(s) {
		case 1:
		case 2:
			if len(kept) > 0 {
				kept = kept[:len(kept)-1]
			}
		default:
			if s != "" {
				kept = append(kept, s)
			}
		}
	}
	out := "/" + strings.Join(kept, "/")
	if last := segs[len(segs)-1]; len(kept) > 0 && (last == "" || dotSegment(last) != 0) {
		out += "/"
	}
	return out, true
}

// hasEscapedSlash reports whether p holds "%2F" in either case.
func hasEscapedSlash(p string) bool {
	return strings.Contains(p, "%2F") || strings.Contains(p, "%2f")
}

// ambiguousDots reports whether the path of a request target (as sent)
// holds dot segments that the two readings of its escaped slash resolve
// differently (/admin/b%2F../../public/x: /public/x with the slash
// decoded, /admin/public/x with it kept inside its segment), which the
// gateway refuses before any limit: whichever reading it limited, an
// upstream that does not resolve dot segments would serve the path as
// sent, by its first segments.
func ambiguousDots(target string) bool {
	if !hasEscapedSlash(target) || !strings.Contains(target, "/.") && !strings.Contains(target, "/%2e") && !strings.Contains(target, "/%2E") {
		return false
	}
	p := OriginPath(target)
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	out, found := resolveDots(p)
	return found && hasEscapedSlash(p) && !readingsAgree(p, out)
}

// readingsAgree reports whether out, the path p (escaped) with its dot
// segments resolved segment by segment, an escaped slash kept inside its
// segment, is also p's decoded reading resolved: decoded, out holds no
// dot segment and cleans to the path p decodes to, cleaned.
func readingsAgree(p, out string) bool {
	dp, err := url.PathUnescape(p)
	if err != nil {
		return false
	}
	do, err := url.PathUnescape(out)
	if err != nil {
		return false
	}
	for s := range strings.SplitSeq(do, "/") {
		if s == "." || s == ".." {
			return false
		}
	}
	return path.Clean(do) == path.Clean(dp)
}

// dotSegment returns 1 when the segment s (escaped) is ".", 2 when it is
// "..", else 0; "%2e" in either case is a dot.
func dotSegment(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '.':
		case s[i] == '%' && i+2 < len(s) && s[i+1] == '2' && (s[i+2] == 'e' || s[i+2] == 'E'):
			i += 2
		default:
			return 0
		}
		if n++; n > 2 {
			return 0
		}
	}
	return n
}
