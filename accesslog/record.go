package accesslog

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// Decision is what the limits said about a request.
type Decision uint8

// Decisions. The zero value is a request no limit applied to.
const (
	// None: no limit applied (or the request was refused before any).
	None Decision = iota
	// Allow: every limit allowed (the request may still have been held
	// in a leaky queue, or refused with 403 afterwards).
	Allow
	// Deny: a limit refused the request (429, or the status its refusal
	// sets).
	Deny
	// Error: the engine could not decide (a cost above a limit's
	// capacity, a matcher error).
	Error
)

var decisionNames = [...]string{"none", "allow", "deny", "error"}

// String returns none, allow, deny or error.
func (d Decision) String() string {
	if int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "decision(" + strconv.Itoa(int(d)) + ")"
}

// ParseDecision reads what String writes.
func ParseDecision(s string) (Decision, error) {
	for i, n := range decisionNames {
		if s == n {
			return Decision(i), nil
		}
	}
	return 0, fmt.Errorf("accesslog: unknown decision %q", s)
}

// Record is one request as the access log shows it. It holds no secret:
// the API key is given by its name.
type Record struct {
	// Time is the instant the limits decided the request at (the store's
	// clock, when the store says), else when it arrived.
	Time time.Time
	// ClientIP is the client's address as resolved (through trusted
	// proxies); the zero Addr when unknown.
	ClientIP netip.Addr
	// ClientKey is the client as its limits counted it, set only when no
	// address names it: "unknown@" and the key of the trusted proxy that
	// forwarded an address that cannot be read (ClientIP is then that
	// proxy's address), so that a replay counts it where the gateway did.
	ClientKey string
	// Method, Host and Path are the request's; Path is URL.Path (no
	// query, which may carry secrets). Proto is HTTP/1.1, HTTP/2.0 ...
	Method, Host, Path, Proto string
	// Status is the answer's status code; Bytes the body bytes written.
	Status int
	Bytes  int64
	// Duration is the time from the request's arrival to the end of the
	// answer (queueing in a leaky bucket included), on the gateway's own
	// clock: Time may be the store's instant, on the store's clock, and
	// Time+Duration is then at or just after the answer's end.
	Duration time.Duration
	// Key is the API key as policy.Match.KeyID gives it: the key's name,
	// or "?" and a hash prefix for a key the policy does not know.
	Key string
	// User is the request's user (verified token or trusted header).
	User string
	// Route is the route the request matched.
	Route string
	// Limit is the binding limit: the one that refused the request, or
	// the one with the fewest units left.
	Limit string
	// Decision is what the limits said.
	Decision Decision
	// RetryAfter is, on a denial, the engine's wait before the same
	// request would pass.
	RetryAfter time.Duration
	// Degraded, when set, says why the limits were decided by their
	// failure policies (deadline, store_error, breaker_open).
	Degraded string
	// Tier is the request's criticality tier on a route with overload
	// control, and Shed, when set, why that control refused it (503) or
	// gave up on it: full, queue_full, tenant_full, timeout, displaced
	// (it made room in the queue for a more critical request), or
	// client_gone (the client left while it waited for a place).
	Tier, Shed string
	// Screened, when set, says that the gateway's gatekeeper answered the
	// request before any limit, and why: ScreenedDenied (an address on
	// the deny list, 403) or ScreenedBanned (the penalty box, 429). No
	// limit charged it, and a replay charges none.
	Screened string
	// Referer and UserAgent are the request's fields, for the combined
	// format (and JSON when set).
	Referer, UserAgent string
}

// Format is the layout of the log's lines.
type Format uint8

// Formats.
const (
	// FormatJSON writes one JSON object a line (the default).
	FormatJSON Format = iota
	// FormatCombined writes NGINX's combined format followed by
	// Floodgate's fields: CombinedLogFormat, in NGINX's notation.
	FormatCombined
)

// ParseFormat reads json or combined.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "json":
		return FormatJSON, nil
	case "combined":
		return FormatCombined, nil
	}
	return 0, fmt.Errorf("accesslog: format must be json or combined, got %q", s)
}

// String returns json or combined.
func (f Format) String() string {
	if f == FormatCombined {
		return "combined"
	}
	return "json"
}

// JSON field names, for readers of the log.
const (
	FieldTime       = "time"
	FieldIP         = "ip"
	FieldClient     = "client"
	FieldMethod     = "method"
	FieldHost       = "host"
	FieldPath       = "path"
	FieldProto      = "proto"
	FieldStatus     = "status"
	FieldBytes      = "bytes"
	FieldDuration   = "duration_us"
	FieldRoute      = "route"
	FieldKey        = "key"
	FieldUser       = "user"
	FieldLimit      = "limit"
	FieldDecision   = "decision"
	FieldRetryAfter = "retry_after_us"
	FieldDegraded   = "degraded"
	FieldTier       = "tier"
	FieldShed       = "shed"
	FieldScreened   = "screened"
	FieldReferer    = "referer"
	FieldUserAgent  = "user_agent"
)

// Values of Record.Screened.
const (
	// ScreenedDenied: the client's address is on the deny list (403).
	ScreenedDenied = "denied"
	// ScreenedBanned: the penalty box bans the request's client, key or
	// user (429).
	ScreenedBanned = "banned"
)

// TimeLayout is the layout of the JSON time field: UTC, microseconds.
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// CombinedLogFormat is FormatCombined in NGINX's log_format notation: the
// combined format, then the request time and the log time in seconds (to
// the microsecond; the request was decided at msec - request_time), and
// Floodgate's API key name, binding limit and decision, the client as its
// limits counted it when no address names it (Record.ClientKey, ""
// otherwise), and why the limits were decided by their failure policies
// (Record.Degraded), why overload control shed the request (Record.Shed)
// and why the gatekeeper answered it before any limit (Record.Screened),
// each "-" when none. $remote_user is the request's user.
const CombinedLogFormat = CombinedLogFormatV2 + ` "$floodgate_degraded" "$floodgate_shed" "$floodgate_screened"`

// CombinedLogFormatV2 is FormatCombined as written on 2026-12-06, without
// the degraded, shed and screened fields: a replay still reads logs
// written so.
const CombinedLogFormatV2 = CombinedLogFormatV1 + ` "$floodgate_client"`

// CombinedLogFormatV1 is FormatCombined as written until 2026-12-06,
// without "$floodgate_client" either: a replay still reads logs written
// so.
const CombinedLogFormatV1 = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent ` +
	`"$http_referer" "$http_user_agent" $request_time $msec "$floodgate_key" "$floodgate_limit" "$floodgate_decision"`

// AppendJSON appends r as one JSON object and a newline.
func AppendJSON(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = appendTime(b, r.Time)
	b = append(b, `","ip":"`...)
	if r.ClientIP.IsValid() {
		b = r.ClientIP.AppendTo(b)
	}
	b = append(b, '"')
	if r.ClientKey != "" {
		b = appendField(b, FieldClient, r.ClientKey)
	}
	b = appendField(b, FieldMethod, r.Method)
	if r.Host != "" {
		b = appendField(b, FieldHost, r.Host)
	}
	b = appendField(b, FieldPath, r.Path)
	if r.Proto != "" {
		b = appendField(b, FieldProto, r.Proto)
	}
	b = appendInt(b, FieldStatus, int64(r.Status))
	b = appendInt(b, FieldBytes, r.Bytes)
	b = appendInt(b, FieldDuration, r.Duration.Microseconds())
	for _, f := range [...]struct{ k, v string }{{FieldRoute, r.Route}, {FieldKey, r.Key}, {FieldUser, r.User}, {FieldLimit, r.Limit}} {
		if f.v != "" {
			b = appendField(b, f.k, f.v)
		}
	}
	b = appendField(b, FieldDecision, r.Decision.String())
	if r.RetryAfter > 0 {
		b = appendInt(b, FieldRetryAfter, (r.RetryAfter + time.Microsecond - 1).Microseconds())
	}
	for _, f := range [...]struct{ k, v string }{{FieldDegraded, r.Degraded}, {FieldTier, r.Tier}, {FieldShed, r.Shed},
		{FieldScreened, r.Screened}, {FieldReferer, r.Referer}, {FieldUserAgent, r.UserAgent}} {
		if f.v != "" {
			b = appendField(b, f.k, f.v)
		}
	}
	return append(b, "}\n"...)
}

// appendTime appends t as TimeLayout does (UTC, to the microsecond),
// without the layout's interpretation.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	if y < 0 || y > 9999 {
		return t.Truncate(time.Microsecond).AppendFormat(b, TimeLayout)
	}
	b = appendDigits(b, y, 4)
	b = append(b, '-')
	b = appendDigits(b, int(mo), 2)
	b = append(b, '-')
	b = appendDigits(b, d, 2)
	b = append(b, 'T')
	b = appendDigits(b, h, 2)
	b = append(b, ':')
	b = appendDigits(b, mi, 2)
	b = append(b, ':')
	b = appendDigits(b, s, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/1000, 6)
	return append(b, 'Z')
}

// appendDigits appends v (non-negative) in exactly n decimal digits.
func appendDigits(b []byte, v, n int) []byte {
	var buf [9]byte
	for i := n - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, buf[:n]...)
}

func appendField(b []byte, k, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return AppendJSONString(b, v)
}

func appendInt(b []byte, k string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// AppendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD. The
// characters a terminal or a viewer acts on beyond the C0 controls (the
// C1 controls, among them the 8-bit CSI, the line and paragraph
// separators, and the marks, embeddings, overrides and isolates that
// reorder text) are written as \uXXXX, so that what a client sent is
// read back as it was and shown as text.
func AppendJSONString(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&15])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if actedOn(r) {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', hexd[r>>12&15], hexd[r>>8&15], hexd[r>>4&15], hexd[r&15])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// actedOn reports whether a terminal or a text viewer acts on r instead
// of showing it: a C1 control, a line or paragraph separator, or a
// directional mark, embedding, override or isolate.
func actedOn(r rune) bool {
	return r >= 0x80 && r <= 0x9f || r == 0x200e || r == 0x200f || r >= 0x2028 && r <= 0x202e ||
		r >= 0x2066 && r <= 0x2069 || r == 0x061c
}

// AppendCombined appends r in CombinedLogFormat and a newline.
func AppendCombined(b []byte, r *Record) []byte {
	if r.ClientIP.IsValid() {
		b = r.ClientIP.AppendTo(b)
	} else {
		b = append(b, '-')
	}
	b = append(b, " - "...)
	b = appendBare(b, r.User)
	start := r.Time.Truncate(time.Microsecond)
	dur := r.Duration.Truncate(time.Microsecond)
	end := start.Add(dur)
	b = append(b, " ["...)
	b = end.UTC().AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendBare(b, r.Method)
	b = append(b, ' ')
	b = appendPath(b, r.Path)
	b = append(b, ' ')
	b = appendBare(b, r.Proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.Bytes, 10)
	b = append(b, ` "`...)
	b = appendQuoted(b, r.Referer)
	b = append(b, `" "`...)
	b = appendQuoted(b, r.UserAgent)
	b = append(b, `" `...)
	b = appendSeconds(b, dur.Microseconds())
	b = append(b, ' ')
	b = appendSeconds(b, end.UnixMicro())
	b = append(b, ` "`...)
	b = appendQuoted(b, r.Key)
	b = append(b, `" "`...)
	b = appendQuoted(b, r.Limit)
	b = append(b, `" "`...)
	b = append(b, r.Decision.String()...)
	b = append(b, `" "`...)
	b = appendQuoted(b, r.ClientKey)
	b = append(b, `" "`...)
	b = appendQuoted(b, r.Degraded)
	b = append(b, `" "`...)
	b = appendQuoted(b, r.Shed)
	b = append(b, `" "`...)
	b = appendQuoted(b, r.Screened)
	return append(b, "\"\n"...)
}

// appendSeconds appends µs microseconds as seconds with six decimals.
func appendSeconds(b []byte, us int64) []byte {
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1e6, 10)
	frac := us % 1e6
	b = append(b, '.')
	for d := int64(100000); d > 0; d /= 10 {
		b = append(b, byte('0'+frac/d%10))
	}
	return b
}

// appendBare appends a value that stands outside quotes: "-" when empty,
// anything but printable ASCII other than space and '"' escaped as \xHH
// (as NGINX escapes), and a value that is "-" itself as \x2D, so that it
// reads back as the value it is, not as an empty field.
func appendBare(b []byte, s string) []byte {
	switch s {
	case "":
		return append(b, '-')
	case "-":
		return append(b, `\x2D`...)
	}
	return appendEscaped(b, s, true)
}

// appendQuoted appends a value that stands inside quotes: "-" when empty,
// \x2D when it is "-" itself.
func appendQuoted(b []byte, s string) []byte {
	switch s {
	case "":
		return append(b, '-')
	case "-":
		return append(b, `\x2D`...)
	}
	return appendEscaped(b, s, false)
}

func appendEscaped(b []byte, s string, bare bool) []byte {
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || (bare && c == ' ') {
			b = append(b, '\\', 'x', hexd[c>>4], hexd[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// appendPath appends a path percent-encoding what would break the request
// line (spaces, quotes, control and non-ASCII bytes, and '%' itself).
func appendPath(b []byte, s string) []byte {
	const hexd = "0123456789ABCDEF"
	if s == "" {
		return append(b, '/')
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '"' || c == '%' || c == '\\' {
			b = append(b, '%', hexd[c>>4], hexd[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}
