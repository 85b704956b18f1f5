package gateway

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// The reverse proxy answers some requests itself before their request
// path, the same way on both engines: requests no upstream should be sent
// as a path, and what net/http's server refuses before any handler runs,
// which the edge engine refuses the same way. Like net/http's own
// refusals, they are answered before any limit, never counted, and the
// connection is closed after them (but for OPTIONS *, which net/http's
// server answers 200 itself).

// maxMethodBytes bounds a request's method. Every method registered with
// IANA is at most 17 bytes long; a longer one than this is answered 501,
// as RFC 9112 §3 asks of a server for a method longer than any it
// implements.
const maxMethodBytes = 32

// Preflight returns the answer the reverse proxy gives a request before
// its request path, or 0: status and the text of a plain answer, close
// when the connection closes after it. target is the request target as
// sent (the request line's), host its Host field (net/http's server
// checks the field, whatever the target says), http11 whether the request
// is HTTP/1.1 (an HTTP/1.1 request without a host is refused).
func Preflight(method, target, host string, http11 bool) (status int, text string, close bool) {
	switch {
	case len(method) > maxMethodBytes:
		return http.StatusNotImplemented, "501 Not Implemented: method too long", true
	case method == http.MethodConnect:
		// A reverse proxy opens no tunnels, as NGINX answers CONNECT.
		return http.StatusMethodNotAllowed, "405 Method Not Allowed: CONNECT is not served", true
	case !validHost(host):
		// Before OPTIONS *, which net/http's server refuses as any
		// request with a Host it does not take (user info), and fasthttp
		// as well (an unclosed "["): refused alike on each engine.
		return http.StatusBadRequest, "400 Bad Request: malformed Host header", true
	case target == "*" && method == http.MethodOptions:
		// The server's own options, as net/http's server answers them: no
		// upstream is asked for a path "*".
		return http.StatusOK, "", false
	case target == "*":
		// PRI * on HTTP/1 is HTTP/2's preface sent as HTTP/1.1: no request.
		return http.StatusBadRequest, "400 Bad Request: the target * is for OPTIONS only", true
	case !strings.HasPrefix(target, "/") && !absoluteForm(target):
		// RFC 9112 §3.2: a target is a path, an absolute URI, an authority
		// (CONNECT) or * (OPTIONS), and an http URI has an authority (RFC
		// 9110 §4.2.1). net/http's server would take http:/x or x:/y for the
		// path /x or /y on the Host field's host and fasthttp refuse it:
		// one request forwarded by one engine, refused by the other.
		return http.StatusBadRequest, "400 Bad Request: a target neither a path nor an absolute URI", true
	case absoluteWithoutHost(target):
		// RFC 9110 §4.2.1: an http URI with an empty host is invalid.
		// net/http's server would take the Host field's host for it and
		// fasthttp none: one request routed and limited by two hosts.
		return http.StatusBadRequest, "400 Bad Request: an absolute target without a host", true
	case absoluteBadHost(target):
		// The target's host wins over the Host field (RFC 9112 §3.2.2),
		// so it is held to what a Host field is: net/http's server
		// refuses a byte above 0x7F there, fasthttp took it and the
		// request was routed, limited and forwarded by it.
		return http.StatusBadRequest, "400 Bad Request: a malformed host in the target", true
	case strings.IndexByte(target, '#') >= 0:
		// RFC 9112 3.2: a target has no fragment. fasthttp would end the
		// path at "#" and the upstream get the whole target: limited as
		// one path, served as another.
		return http.StatusBadRequest, "400 Bad Request: a fragment in the target", true
	case !validEscapes(target):
		// net/http's server refuses a broken escape in the path, not in
		// the query; an upstream would read either its own way.
		return http.StatusBadRequest, "400 Bad Request: a broken percent escape in the target", true
	case paramBeforeDotDot(targetPath(target)):
		// Checked on the target as sent, before any limit, whatever the
		// engine (badTarget reads the same path later, for Handle).
		return http.StatusBadRequest, "400 Bad Request: a path parameter on an empty or \".\" segment before \"..\"", true
	case ambiguousDots(target):
		// Resolved one way by the gateway and served as sent, by its first
		// segments, by an upstream that does not resolve dot segments.
		return http.StatusBadRequest, "400 Bad Request: dot segments that an escaped slash (%2F) makes resolve two ways", true
	case http11 && host == "":
		return http.StatusBadRequest, "400 Bad Request: missing required Host header", true
	}
	return 0, "", false
}

// absoluteForm reports whether target is in absolute form: a scheme, then
// "://" and an authority.
func absoluteForm(target string) bool {
	i := strings.Index(target, "://")
	return i > 0 && validScheme(target[:i])
}

// OriginPath returns a request target as the gateway routes it: of a
// target in absolute form (any scheme: "ftp://host/x" as "http://host/x",
// as net/http and fasthttp read it), what follows its authority ("/x",
// "/" when nothing does, "/?q" for a query alone); any other target as it
// is. A replay reads a logged request line with it.
func OriginPath(target string) string {
	if !absoluteForm(target) {
		return target
	}
	rest := target[strings.Index(target, "://")+3:]
	i := strings.IndexAny(rest, "/?")
	switch {
	case i < 0:
		return "/"
	case rest[i] == '?':
		return "/" + rest[i:]
	}
	return rest[i:]
}

// TargetPath returns the path of a request target as the gateway routes,
// limits and logs it, the one reading of both engines: the path of
// OriginPath(target) (the part before its query) decoded, and raw, that
// path as sent when it is not path's default escaping (else ""), as
// net/http's server reads a target into URL.Path and URL.RawPath; but "/"
// for an absolute-form target without a path, where net/http's is "".
// Nothing else is read into it: no dot segment resolved, no slash merged
// (the edge engine's parser does both), so a path the gateway refuses
// (badTarget) is refused by both engines and logged alike. A target
// without an escape is returned without a copy.
func TargetPath(target string) (path, raw string) {
	p := OriginPath(target)
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	path = p
	if strings.IndexByte(p, '%') >= 0 {
		d, err := url.PathUnescape(p)
		if err != nil {
			return p, "" // Preflight refuses a broken escape before any path is read
		}
		path = d
	}
	if (&url.URL{Path: path}).EscapedPath() != p {
		raw = p
	}
	return path, raw
}

// absoluteAuthority returns the host and port of an absolute-form target
// with an authority ("scheme://"), its user info left out, and false for
// a target in another form.
func absoluteAuthority(target string) (string, bool) {
	if len(target) == 0 || target[0] == '/' {
		return "", false // origin form, as most are: no search for "://"
	}
	i := strings.Index(target, "://")
	if i <= 0 || !validScheme(target[:i]) {
		return "", false
	}
	auth := target[i+3:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	if j := strings.LastIndexByte(auth, '@'); j >= 0 {
		auth = auth[j+1:]
	}
	return auth, true
}

// absoluteWithoutHost reports whether target is in absolute form with an
// authority that names no host: none at all, or user info or a port
// alone (http:///x, http://u@/x, http://:80/x).
func absoluteWithoutHost(target string) bool {
	auth, ok := absoluteAuthority(target)
	if !ok {
		return false
	}
	if j := strings.LastIndexByte(auth, ':'); j >= 0 && strings.IndexByte(auth[j:], ']') < 0 {
		auth = auth[:j]
	}
	return auth == ""
}

// absoluteBadHost reports whether target is in absolute form with an
// authority whose host and port are not those of a valid Host field
// (validHost).
func absoluteBadHost(target string) bool {
	auth, ok := absoluteAuthority(target)
	return ok && !validHost(auth)
}

// validScheme reports whether s is a URI scheme (RFC 3986 §3.1): a letter,
// then letters, digits, "+", "-" and ".".
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// targetPath returns the path of a request target (origin or absolute
// form) decoded, "" when it has no ';' escaped or not (then no path
// parameter either). Its escapes were checked (validEscapes).
func targetPath(target string) string {
	if strings.IndexByte(target, ';') < 0 && (strings.IndexByte(target, '%') < 0 ||
		!strings.Contains(target, "%3b") && !strings.Contains(target, "%3B")) {
		return ""
	}
	p, _ := TargetPath(target)
	return p
}

// validEscapes reports whether every % in a request target starts an
// escape of two hexadecimal digits.
func validEscapes(target string) bool {
	for {
		i := strings.IndexByte(target, '%')
		if i < 0 {
			return true
		}
		if i+2 >= len(target) || !isHex(target[i+1]) || !isHex(target[i+2]) {
			return false
		}
		target = target[i+3:]
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validHost reports whether a request's host is one net/http's server
// takes (the bytes of RFC 3986's host and port, as httpguts.ValidHostHeader
// checks) with its brackets where an IP literal has them: at the start,
// closed once, and followed by nothing or a port.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if !validHostByte[h[i]] {
			return false
		}
	}
	open, end := strings.IndexByte(h, '['), strings.IndexByte(h, ']')
	switch {
	case open < 0 && end < 0:
		return true
	case open != 0 || end < 0 || strings.IndexByte(h[1:], '[') >= 0 || strings.IndexByte(h[end+1:], ']') >= 0:
		return false
	}
	port := h[end+1:]
	if port == "" {
		return true
	}
	if port[0] != ':' {
		return false
	}
	for i := 1; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

// validHostByte says which bytes a host may hold, as net/http's server
// (golang.org/x/net/http/httpguts) says it.
var validHostByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!$%&()*+,-.:;=[]'_~" {
		t[c] = true
	}
	return t
}()

// badTrailers are the fields that may not be sent in a trailer section
// (RFC 9110 §6.5.1: framing, routing, authentication, controls and
// cookies), as the edge engine's parser refuses them.
var badTrailers = map[string]bool{
	"Authorization": true, "Content-Encoding": true, "Content-Length": true, "Content-Range": true,
	"Content-Type": true, "Connection": true, "Cookie": true, "Expect": true, "Host": true,
	"Keep-Alive": true, "Location": true, "Max-Forwards": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Range": true, "Set-Cookie": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Www-Authenticate": true,
}

// badTrailer returns the first field of t that may not be a trailer, or "".
func badTrailer(t http.Header) string {
	for k := range t {
		if badTrailers[k] {
			return k
		}
	}
	return ""
}

// badDeclaredTrailer returns the first field a request's Trailer fields
// name that may not be a trailer, or "".
func badDeclaredTrailer(h http.Header) string {
	for _, v := range h["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			if k := http.CanonicalHeaderKey(strings.TrimSpace(name)); badTrailers[k] {
				return k
			}
		}
	}
	return ""
}

// errBadTrailer breaks off a request body whose trailer section holds a
// field no trailer may hold: the upstream never gets it whole.
var errBadTrailer = errors.New("gateway: a request trailer holds a field no trailer may")

// trailerCheck is the body of a chunked request on the net/http engine:
// at its end it fails when the trailers hold a field no trailer may hold,
// as the edge engine's parser does, so that no upstream gets them.
type trailerCheck struct {
	io.ReadCloser
	r   *http.Request
	err error
}

func (b *trailerCheck) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && badTrailer(b.r.Trailer) != "" {
		b.err = errBadTrailer
		return n, b.err
	}
	return n, err
}

// AnsweredBeforeRequestPath reports whether a request the access log shows
// with no route and no decision was answered before its request path
// (LogRefused): by Preflight (400, 405 to CONNECT, 501, 200 to OPTIONS *)
// or by an engine's own refusal of a request it will not serve (400, 417,
// 501). No policy would have charged it: a replay charges it nothing.
func AnsweredBeforeRequestPath(status int, method, path string) bool {
	switch status {
	case http.StatusBadRequest, http.StatusExpectationFailed, http.StatusNotImplemented:
		return true
	case http.StatusMethodNotAllowed:
		return method == http.MethodConnect
	case http.StatusOK:
		return method == http.MethodOptions && path == "*"
	}
	return false
}
