package replay

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/gateway"
)

// Log formats of NGINX and Envoy, in their own notations.
const (
	// NginxCombined is NGINX's predefined combined format.
	NginxCombined = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`
	// NginxMain is the main format of NGINX's default nginx.conf.
	NginxMain = NginxCombined + ` "$http_x_forwarded_for"`
	// EnvoyDefault is Envoy's default access log format.
	EnvoyDefault = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" ` +
		`%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% ` +
		`%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" ` +
		`"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"`
)

// fieldKind is what one variable of a log format holds.
type fieldKind uint8

const (
	fIgnore      fieldKind = iota
	fClientIP              // $remote_addr, %DOWNSTREAM_REMOTE_ADDRESS%
	fForwarded             // %REQ(X-FORWARDED-FOR)%: the client is its last address
	fUser                  // $remote_user
	fTimeLocal             // $time_local: the log time, to the second
	fTimeISO               // $time_iso8601: the log time, to the second
	fMsec                  // $msec: the log time, to the millisecond (or better)
	fStartTime             // %START_TIME%: the arrival
	fRequest               // $request: "GET /path HTTP/1.1"
	fMethod                // $request_method, %REQ(:METHOD)%
	fPath                  // $uri: the decoded path
	fRawPath               // $request_uri, %REQ(:PATH)%: as sent, with the query
	fProto                 // $server_protocol, %PROTOCOL%
	fStatus                // $status, %RESPONSE_CODE%
	fRequestTime           // $request_time: seconds
	fDurationMs            // %DURATION%: milliseconds
	fHost                  // $host, %REQ(:AUTHORITY)%
	fHeader                // $http_NAME, %REQ(NAME)%
	fKey                   // $floodgate_key
	fLimit                 // $floodgate_limit
	fDecision              // $floodgate_decision
	fClientKey             // $floodgate_client
	fDegraded              // $floodgate_degraded
	fShed                  // $floodgate_shed
	fScreened              // $floodgate_screened
	fAPIKey                // a CSV's api_key: the raw key
	numFieldKinds
)

// tmplPart is a literal or a variable of a compiled format.
type tmplPart struct {
	lit    []byte
	kind   fieldKind
	header string
	field  bool
}

// logTemplate is a compiled NGINX log_format or Envoy format string: lines
// are cut at the literals between the variables.
type logTemplate struct {
	name   string
	parts  []tmplPart
	has    [numFieldKinds]bool
	denied []int
	in     *interner
	digits int // fraction digits of the times seen

	lastLocal   []byte // the $time_local parsed last, and its value
	lastLocalNs int64
}

// compileNginx compiles an NGINX log_format.
func compileNginx(format string, denied []int, in *interner) (*logTemplate, error) {
	t := &logTemplate{name: "nginx", denied: denied, in: in}
	var lit []byte
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '$' {
			lit = append(lit, c)
			continue
		}
		j, name := i+1, ""
		if j < len(format) && format[j] == '{' {
			k := strings.IndexByte(format[j:], '}')
			if k < 0 {
				return nil, fmt.Errorf("replay: log format: unterminated ${ at %d", i)
			}
			name, j = format[j+1:j+k], j+k+1
		} else {
			for j < len(format) && (isAlnum(format[j]) || format[j] == '_') {
				j++
			}
			name = format[i+1 : j]
		}
		if name == "" {
			lit = append(lit, c)
			continue
		}
		if err := t.add(lit, nginxVar(name)); err != nil {
			return nil, err
		}
		lit = nil
		i = j - 1
	}
	return t, t.finish(lit)
}

func nginxVar(name string) tmplPart {
	kinds := map[string]fieldKind{
		"remote_addr": fClientIP, "remote_user": fUser, "time_local": fTimeLocal, "time_iso8601": fTimeISO,
		"msec": fMsec, "request": fRequest, "request_method": fMethod, "uri": fPath, "document_uri": fPath,
		"request_uri": fRawPath, "server_protocol": fProto, "status": fStatus, "request_time": fRequestTime,
		"host": fHost, "http_host": fHost,
		"floodgate_key": fKey, "floodgate_limit": fLimit, "floodgate_decision": fDecision,
		"floodgate_client": fClientKey, "floodgate_degraded": fDegraded, "floodgate_shed": fShed,
		"floodgate_screened": fScreened,
	}
	if k, ok := kinds[name]; ok {
		return tmplPart{kind: k, field: true}
	}
	if h, ok := strings.CutPrefix(name, "http_"); ok {
		return tmplPart{kind: fHeader, header: http.CanonicalHeaderKey(strings.ReplaceAll(h, "_", "-")), field: true}
	}
	return tmplPart{kind: fIgnore, field: true}
}

// ownCombined reads Floodgate's combined log whichever way each line was
// written: with the degraded, shed and screened fields
// (accesslog.CombinedLogFormat), with the client's field only
// (accesslog.CombinedLogFormatV2) or with neither
// (accesslog.CombinedLogFormatV1), so that a file a gateway went on
// appending to across an upgrade, or back, reads whole. A line reads as
// one of them only: the last field of each ends the line.
type ownCombined struct {
	t [3]*logTemplate // the format the last line read as first
}

// ownCombinedFormats are Floodgate's combined formats, newest first.
var ownCombinedFormats = [3]string{accesslog.CombinedLogFormat, accesslog.CombinedLogFormatV2, accesslog.CombinedLogFormatV1}

// isOwnCombined reports whether lf is one of Floodgate's combined formats.
func isOwnCombined(lf string) bool {
	for _, f := range ownCombinedFormats {
		if lf == f {
			return true
		}
	}
	return false
}

// newOwnCombined reads lines as t (compiled from lf, one of Floodgate's
// combined formats), and as the others where t fails.
func newOwnCombined(t *logTemplate, lf string, denied []int, in *interner) (*ownCombined, error) {
	p := &ownCombined{t: [3]*logTemplate{t}}
	n := 1
	for _, f := range ownCombinedFormats {
		if f == lf {
			continue
		}
		o, err := compileNginx(f, denied, in)
		if err != nil {
			return nil, err
		}
		p.t[n] = o
		n++
	}
	return p, nil
}

func (p *ownCombined) parse(line []byte, rec *Record) error {
	was := *rec
	err := p.t[0].parse(line, rec)
	if err == nil {
		return nil
	}
	for i := 1; i < len(p.t); i++ {
		*rec = was
		if p.t[i].parse(line, rec) == nil {
			p.t[0], p.t[i] = p.t[i], p.t[0]
			return nil
		}
	}
	*rec = was
	return err
}

func (p *ownCombined) resolution() time.Duration {
	d := 0
	for _, t := range p.t {
		d = max(d, t.digits)
	}
	return digitsResolution(d, time.Microsecond)
}

// compileEnvoy compiles an Envoy format string.
func compileEnvoy(format string, denied []int, in *interner) (*logTemplate, error) {
	t := &logTemplate{name: "envoy", denied: denied, in: in}
	format = strings.TrimRight(format, "\n")
	var lit []byte
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			lit = append(lit, c)
			continue
		}
		k := strings.IndexByte(format[i+1:], '%')
		if k < 0 {
			return nil, fmt.Errorf("replay: log format: unterminated %% at %d", i)
		}
		op := format[i+1 : i+1+k]
		if op == "" { // %% is a literal %
			lit = append(lit, '%')
			i++
			continue
		}
		if err := t.add(lit, envoyOp(op)); err != nil {
			return nil, err
		}
		lit = nil
		i += k + 1
	}
	return t, t.finish(lit)
}

func envoyOp(op string) tmplPart {
	name, arg := op, ""
	if j := strings.IndexByte(op, '('); j >= 0 {
		if e := strings.LastIndexByte(op, ')'); e > j {
			name, arg = op[:j], op[j+1:e]
		}
	}
	switch name {
	case "START_TIME":
		return tmplPart{kind: fStartTime, field: true}
	case "PROTOCOL":
		return tmplPart{kind: fProto, field: true}
	case "RESPONSE_CODE":
		return tmplPart{kind: fStatus, field: true}
	case "DURATION":
		return tmplPart{kind: fDurationMs, field: true}
	case "DOWNSTREAM_REMOTE_ADDRESS", "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT":
		return tmplPart{kind: fClientIP, field: true}
	case "REQ":
		first, _, _ := strings.Cut(arg, "?")
		switch strings.ToUpper(first) {
		case ":METHOD":
			return tmplPart{kind: fMethod, field: true}
		case ":PATH", "X-ENVOY-ORIGINAL-PATH":
			return tmplPart{kind: fRawPath, field: true}
		case ":AUTHORITY", "HOST":
			return tmplPart{kind: fHost, field: true}
		case "X-FORWARDED-FOR":
			return tmplPart{kind: fForwarded, header: "X-Forwarded-For", field: true}
		}
		return tmplPart{kind: fHeader, header: http.CanonicalHeaderKey(first), field: true}
	}
	return tmplPart{kind: fIgnore, field: true}
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// add appends a literal (if any) and a variable.
func (t *logTemplate) add(lit []byte, v tmplPart) error {
	if len(lit) > 0 {
		t.parts = append(t.parts, tmplPart{lit: lit})
	} else if n := len(t.parts); n > 0 && t.parts[n-1].field {
		return errors.New("replay: log format: two variables with nothing between them cannot be told apart")
	}
	t.parts = append(t.parts, v)
	t.has[v.kind] = true
	return nil
}

// finish appends the trailing literal and checks that the format says
// when each request came.
func (t *logTemplate) finish(lit []byte) error {
	if len(lit) > 0 {
		t.parts = append(t.parts, tmplPart{lit: lit})
	}
	if !t.has[fStartTime] && !t.has[fMsec] && !t.has[fTimeLocal] && !t.has[fTimeISO] {
		return errors.New("replay: log format: no time ($time_local, $msec, $time_iso8601 or %START_TIME%)")
	}
	if !t.has[fRequest] && (!t.has[fMethod] || (!t.has[fPath] && !t.has[fRawPath])) {
		return errors.New("replay: log format: no request ($request, or a method and a path)")
	}
	return nil
}

// resolution is the precision of the arrival times the log gives.
func (t *logTemplate) resolution() time.Duration {
	switch {
	case t.has[fStartTime], t.has[fMsec]:
		return digitsResolution(t.digits, time.Microsecond)
	}
	return time.Second
}

func (t *logTemplate) parse(line []byte, rec *Record) error {
	var (
		pos                   int
		end, start, dur       int64
		haveEnd, haveStart    bool
		endDigits, startDigit int
		forwarded             []byte
		undecided, degraded   bool
	)
	for i := 0; i < len(t.parts); i++ {
		p := &t.parts[i]
		if !p.field {
			if !bytes.HasPrefix(line[pos:], p.lit) {
				return fmt.Errorf("expected %q at column %d", p.lit, pos+1)
			}
			pos += len(p.lit)
			continue
		}
		var v []byte
		if i+1 < len(t.parts) {
			next := t.parts[i+1].lit
			k := bytes.Index(line[pos:], next)
			if k < 0 {
				return fmt.Errorf("expected %q after column %d", next, pos+1)
			}
			v = line[pos : pos+k]
		} else {
			v = line[pos:]
		}
		pos += len(v)
		if len(v) == 1 && v[0] == '-' {
			if p.kind == fStatus {
				return errors.New("no status")
			}
			continue
		}
		switch p.kind {
		case fClientIP:
			a, err := t.in.addr(v)
			if err != nil {
				return err
			}
			rec.ClientIP = a
		case fForwarded:
			forwarded = v
			rec.Headers = append(rec.Headers, Header{Name: p.header, Value: t.in.str(v)})
		case fUser:
			rec.User = t.in.str(unescapeNginx(v))
		case fTimeLocal:
			if !haveEnd && !t.has[fMsec] {
				ns, ok := t.timeLocal(v)
				if !ok {
					return fmt.Errorf("bad time %q", v)
				}
				end, haveEnd = ns, true
			}
		case fTimeISO:
			if !haveEnd && !t.has[fMsec] {
				ns, _, ok := parseRFC3339(v)
				if !ok {
					return fmt.Errorf("bad time %q", v)
				}
				end, haveEnd = ns, true
			}
		case fMsec:
			ns, digits, ok := parseSeconds(v)
			if !ok {
				return fmt.Errorf("bad msec %q", v)
			}
			end, haveEnd, endDigits = ns, true, digits
		case fStartTime:
			ns, digits, ok := parseRFC3339(v)
			if !ok {
				if ns, digits, ok = parseSeconds(v); !ok {
					return fmt.Errorf("bad start time %q", v)
				}
			}
			start, haveStart, startDigit = ns, true, digits
		case fRequest:
			if err := t.request(v, rec); err != nil {
				return err
			}
		case fMethod:
			rec.Method = t.in.method(unescapeNginx(v))
		case fPath:
			rec.Path = string(unescapeNginx(v))
		case fRawPath:
			setTarget(rec, string(v))
		case fProto:
		case fStatus:
			n, ok := atoi(v)
			if !ok {
				return fmt.Errorf("bad status %q", v)
			}
			rec.Status = int(n)
		case fRequestTime:
			ns, _, ok := parseSeconds(v)
			if !ok {
				return fmt.Errorf("bad request time %q", v)
			}
			dur = ns
		case fDurationMs:
			n, ok := atoi(v)
			if !ok || n > int64(maxDuration/time.Millisecond) {
				return fmt.Errorf("bad duration %q", v)
			}
			dur = n * int64(time.Millisecond)
		case fHost:
			rec.Host = t.in.str(v)
		case fHeader:
			rec.Headers = append(rec.Headers, Header{Name: p.header, Value: t.in.str(unescapeNginx(v))})
		case fKey:
			rec.Key = t.in.str(unescapeNginx(v))
		case fLimit:
			rec.Limit = t.in.str(unescapeNginx(v))
		case fClientKey:
			if string(v) != "-" { // none: an address names the client
				rec.ClientKey = t.in.str(unescapeNginx(v))
			}
		case fDecision:
			d, err := accesslog.ParseDecision(string(v))
			if err != nil {
				return err
			}
			rec.Logged = LoggedAllow
			if d == accesslog.Deny {
				rec.Logged = LoggedDeny
			}
			undecided = d == accesslog.None
		case fDegraded:
			degraded = true
		case fShed:
			rec.Shed = t.in.str(unescapeNginx(v))
		case fScreened:
			rec.screened = true
		}
	}
	if pos != len(line) && !(len(t.parts) > 0 && t.parts[len(t.parts)-1].field) {
		// Not the text itself: fields the format does not name, such as
		// $http_authorization, may hold credentials.
		return fmt.Errorf("unexpected %d bytes at the end, not shown (they may hold a credential): the format names fewer fields than the line has", len(line)-pos)
	}
	rec.Duration = time.Duration(dur)
	switch {
	case haveStart:
		rec.Time = start
		t.digits = max(t.digits, startDigit)
	case haveEnd:
		rec.Time = end - dur
		t.digits = max(t.digits, endDigits)
	default:
		return errors.New("no time")
	}
	if !rec.ClientIP.IsValid() && len(forwarded) > 0 {
		last := forwarded
		if k := bytes.LastIndexByte(last, ','); k >= 0 {
			last = last[k+1:]
		}
		if a, err := t.in.addr(bytes.TrimSpace(last)); err == nil {
			rec.ClientIP = a
		}
	}
	if !t.has[fDecision] {
		rec.Logged = LoggedAllow
		for _, s := range t.denied {
			if rec.Status == s {
				rec.Logged = LoggedDeny
			}
		}
	}
	if degraded {
		rec.Logged = LoggedDegraded
	}
	if rec.Method == "" {
		return errors.New("no method")
	}
	// A request the gatekeeper answered (its screened field) charged no
	// limit. Floodgate's combined format has no route: a request with no
	// key, no limit and no decision, answered as only a refusal before
	// the request path is, is taken for one (Record.Refused).
	rec.Refused = rec.screened || undecided && rec.Key == "" && rec.Limit == "" && rec.ClientKey == "" &&
		gateway.AnsweredBeforeRequestPath(rec.Status, rec.Method, rec.Path)
	return nil
}

// request splits "$request": method, URI (query dropped, decoded) and
// protocol.
func (t *logTemplate) request(v []byte, rec *Record) error {
	sp := bytes.IndexByte(v, ' ')
	if sp <= 0 {
		return fmt.Errorf("bad request line %s", requestShown(v))
	}
	rec.Method = t.in.method(unescapeNginx(v[:sp]))
	uri := v[sp+1:]
	if k := bytes.LastIndexByte(uri, ' '); k >= 0 && bytes.HasPrefix(uri[k+1:], []byte("HTTP/")) {
		uri = uri[:k]
	}
	if len(uri) == 0 {
		return fmt.Errorf("bad request line %s", requestShown(v))
	}
	setTarget(rec, string(unescapeNginx(uri)))
	return nil
}

// requestShown is how an error shows the request line v: quoted up to its
// query, whose bytes are counted, never shown, as it may hold a
// credential (?api_key=...).
func requestShown(v []byte) string {
	i := bytes.IndexByte(v, '?')
	if i < 0 {
		return strconv.Quote(string(v))
	}
	return fmt.Sprintf("%q and a query of %d bytes, not shown (it may hold a credential)", v[:i], len(v)-i)
}

// timeLocal parses $time_local, reusing the last result: consecutive
// lines mostly share their second.
func (t *logTemplate) timeLocal(v []byte) (int64, bool) {
	if bytes.Equal(v, t.lastLocal) {
		return t.lastLocalNs, true
	}
	ns, ok := parseTimeLocal(v)
	if ok {
		t.lastLocal, t.lastLocalNs = append(t.lastLocal[:0], v...), ns
	}
	return ns, ok
}

// unescapeNginx decodes the \xHH escapes NGINX writes for quotes and
// bytes outside printable ASCII.
func unescapeNginx(v []byte) []byte {
	if bytes.IndexByte(v, '\\') < 0 {
		return v
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+3 < len(v) && v[i+1] == 'x' && isHex(v[i+2]) && isHex(v[i+3]) {
			out = append(out, unhex(v[i+2])<<4|unhex(v[i+3]))
			i += 3
			continue
		}
		out = append(out, v[i])
	}
	return out
}
