package replay

import (
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// Logged is what a log says the limits decided about a request.
type Logged uint8

// Logged decisions. A log without a decision field says it by its status
// (Options.DeniedStatuses).
const (
	// LoggedUnknown: the log does not say.
	LoggedUnknown Logged = iota
	// LoggedAllow: the limits let the request through (or none applied).
	LoggedAllow
	// LoggedDeny: a limit refused the request.
	LoggedDeny
	// LoggedDegraded: the limits were decided by their failure policies
	// (the store was failing), which a replay does not predict.
	LoggedDegraded
)

var loggedNames = [...]string{"unknown", "allow", "deny", "degraded"}

// String returns unknown, allow, deny or degraded.
func (l Logged) String() string {
	if int(l) < len(loggedNames) {
		return loggedNames[l]
	}
	return "unknown"
}

// Header is one request header a log holds, for limits keyed by a header.
type Header struct {
	Name, Value string
}

// Record is one request read from a log: what a replay needs to rebuild
// it and what the log says happened.
type Record struct {
	// Time is when the request arrived, in Unix nanoseconds.
	Time int64
	// Source is the index of the log the record comes from, Line its line
	// number there.
	Source int
	Line   int64
	// ClientIP is the client's address (the zero Addr when the log has
	// none).
	ClientIP netip.Addr
	// ClientKey is the client as the gateway counted it when no address
	// names it (Floodgate's JSON log's client field: "unknown@" and the key
	// of the trusted proxy that forwarded an address that cannot be
	// read); "" otherwise.
	ClientKey string
	// Method, Host and Path are the request's; Path is without its query.
	Method, Host, Path string
	// RawPath is the path as sent, escaped, when the log holds the target
	// as sent ($request_uri, a request line) and it differs from Path: a
	// path with an escaped slash is matched as the gateway matched it
	// (gateway.Request.RawPath).
	RawPath string
	// Status is the answer's status; Duration the time to answer it.
	Status   int
	Duration time.Duration
	// Key is the API key as Floodgate's access log writes it: a key's
	// name, or "?" and a hash prefix (policy.Request.KeyName).
	Key string
	// APIKey is the raw key, from logs that hold the key header itself
	// (an NGINX $http_x_api_key); it is hashed like a request's and never
	// shown in reports.
	APIKey string
	// User is the request's user.
	User string
	// Headers are the other request headers the log holds.
	Headers []Header
	// Logged is what the log says was decided; Limit is the binding limit
	// it names, if any.
	Logged Logged
	Limit  string
	// Shed is the reason a route's overload control refused the request,
	// as Floodgate's access log writes it (accesslog.Record.Shed), or "".
	// A replay has no upstream whose latency it could follow, so it does
	// not simulate overload control: it reports the log's sheds as
	// logged.
	Shed string
	// Refused reports that the gateway answered the request before any
	// limit (Floodgate's JSON log: a "screened" field, the gatekeeper's
	// refusal of a denied address or a banned client; or no route,
	// decision "none" and an answer gateway.AnsweredBeforeRequestPath
	// names: a 400 for what the log may not show, such as a field sent
	// twice, CONNECT's 405, OPTIONS *): it charged nothing, and the
	// replay charges nothing for it. Floodgate's combined log names no
	// route: there a line with no key, no limit, no client key and
	// decision "none" so answered is taken as refused, which is what the
	// gateway did under the policy that wrote the log (an upstream's 400
	// to a request no limit applied to charged nothing either); a policy
	// limiting such a route anew charges it in a replay of the JSON log
	// only.
	Refused bool
	// routed, undecided and screened are what the JSON log says of the
	// route, the decision and the gatekeeper, for Refused.
	routed, undecided, screened bool
}

// stripQuery removes a URL's query and fragment, and the scheme and
// authority of an absolute-form target of any scheme (GET http://host/path
// HTTP/1.1 or GET ftp://host/path HTTP/1.1, which a client may send and
// NGINX logs as sent): a server routes it by its path, and so does the
// replay, reading it as the gateway does (gateway.OriginPath).
func stripQuery(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	return gateway.OriginPath(p)
}

// unescapePath decodes %XX escapes of a logged path; a malformed escape is
// kept as written.
// setTarget sets rec's Path from raw, a target as sent (without its query
// or with it), and its RawPath when decoding changed it.
func setTarget(rec *Record, raw string) {
	raw = stripQuery(raw)
	rec.Path = unescapePath(raw)
	if rec.Path != raw {
		rec.RawPath = raw
	}
}

func unescapePath(p string) string {
	if strings.IndexByte(p, '%') < 0 {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			b = append(b, unhex(p[i+1])<<4|unhex(p[i+2]))
			i += 2
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
