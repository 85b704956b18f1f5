package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/gateway"
)

// jsonParser reads Floodgate's JSON access log (accesslog.FormatJSON): a
// flat object a line. Unknown fields are skipped, so lines from a later
// version still read; a "time" may also be Unix seconds.
type jsonParser struct {
	in       *interner
	digits   int               // the fraction digits of the times seen
	scratch  []byte            // a value with escapes, decoded
	keyBuf   []byte            // a key with escapes, decoded
	hdrNames map[string]string // header:NAME fields, canonical names
}

// maxHeaderNames bounds the canonical names of header:NAME fields a
// parser keeps: a log's own are a few, and a log that names ever new ones
// then has each canonicalised where it is read, holding no more.
const maxHeaderNames = 256

func newJSONParser(in *interner) *jsonParser {
	return &jsonParser{in: in, hdrNames: map[string]string{}}
}

func (p *jsonParser) resolution() time.Duration { return digitsResolution(p.digits, time.Microsecond) }

func (p *jsonParser) parse(line []byte, rec *Record) error {
	i := skipWS(line, 0)
	if i == len(line) {
		return errSkip
	}
	if line[i] != '{' {
		return errors.New("not a JSON object")
	}
	i++
	haveTime := false
	for {
		i = skipWS(line, i)
		if i < len(line) && line[i] == '}' {
			break
		}
		if i < len(line) && line[i] == ',' {
			i = skipWS(line, i+1)
		}
		key, next, err := p.str(line, i, &p.keyBuf)
		if err != nil {
			return err
		}
		i = skipWS(line, next)
		if i >= len(line) || line[i] != ':' {
			return errors.New("expected ':'")
		}
		i = skipWS(line, i+1)
		if i >= len(line) {
			return errors.New("truncated line")
		}
		if line[i] == '"' {
			var v []byte
			v, i, err = p.str(line, i, &p.scratch)
			if err != nil {
				return err
			}
			if err := p.setString(rec, key, v); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if string(key) == accesslog.FieldTime {
				haveTime = true
			}
			continue
		}
		start := i
		i, err = skipValue(line, i)
		if err != nil {
			return err
		}
		if err := p.setNumber(rec, key, line[start:i]); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if string(key) == accesslog.FieldTime {
			haveTime = true
		}
	}
	if !haveTime {
		return errors.New("no time field")
	}
	rec.Refused = rec.screened || rec.undecided && !rec.routed && gateway.AnsweredBeforeRequestPath(rec.Status, rec.Method, rec.Path)
	return nil
}

func (p *jsonParser) setString(rec *Record, key, v []byte) error {
	switch string(key) {
	case accesslog.FieldTime:
		ns, digits, ok := parseRFC3339(v)
		if !ok {
			return fmt.Errorf("bad time %q", v)
		}
		rec.Time = ns
		p.digits = max(p.digits, digits)
	case accesslog.FieldIP:
		a, err := p.in.addr(v)
		if err != nil {
			return err
		}
		rec.ClientIP = a
	case accesslog.FieldClient:
		rec.ClientKey = p.in.str(v)
	case accesslog.FieldMethod:
		rec.Method = p.in.method(v)
	case accesslog.FieldHost:
		rec.Host = p.in.str(v)
	case accesslog.FieldPath:
		rec.Path = string(v)
	case accesslog.FieldKey:
		rec.Key = p.in.str(v)
	case accesslog.FieldUser:
		rec.User = p.in.str(v)
	case accesslog.FieldLimit:
		rec.Limit = p.in.str(v)
	case accesslog.FieldDecision:
		d, err := accesslog.ParseDecision(string(v))
		if err != nil {
			return err
		}
		switch d {
		case accesslog.Deny:
			if rec.Logged != LoggedDegraded {
				rec.Logged = LoggedDeny
			}
		case accesslog.Allow, accesslog.None:
			if rec.Logged != LoggedDegraded {
				rec.Logged = LoggedAllow
			}
		}
		rec.undecided = d == accesslog.None
	case accesslog.FieldRoute:
		rec.routed = len(v) > 0
	case accesslog.FieldStatus, accesslog.FieldDuration:
		// A number written as a string.
		return p.setNumber(rec, key, v)
	case accesslog.FieldShed:
		rec.Shed = p.in.str(v)
	case accesslog.FieldScreened:
		rec.screened = len(v) > 0
	case accesslog.FieldDegraded:
		if len(v) > 0 {
			rec.Logged = LoggedDegraded
		}
	case accesslog.FieldUserAgent:
		// The request's fields, as the combined log's are read: a limit
		// may be keyed by them.
		rec.Headers = append(rec.Headers, Header{Name: "User-Agent", Value: p.in.str(v)})
	case accesslog.FieldReferer:
		rec.Headers = append(rec.Headers, Header{Name: "Referer", Value: p.in.str(v)})
	default:
		if name, ok := bytes.CutPrefix(key, []byte("header:")); ok {
			h, ok := p.hdrNames[string(name)]
			if !ok {
				h = http.CanonicalHeaderKey(string(name))
				if len(p.hdrNames) < maxHeaderNames {
					p.hdrNames[string(name)] = h
				}
			}
			rec.Headers = append(rec.Headers, Header{Name: h, Value: p.in.str(v)})
		}
	}
	return nil
}

func (p *jsonParser) setNumber(rec *Record, key, v []byte) error {
	switch string(key) {
	case accesslog.FieldTime:
		ns, digits, ok := parseSeconds(v)
		if !ok {
			return fmt.Errorf("bad time %q", v)
		}
		rec.Time = ns
		p.digits = max(p.digits, digits)
	case accesslog.FieldStatus:
		n, ok := atoi(v)
		if !ok {
			return fmt.Errorf("bad status %q", v)
		}
		rec.Status = int(n)
	case accesslog.FieldDuration:
		n, ok := atoi(v)
		if !ok || n > int64(maxDuration/time.Microsecond) {
			return fmt.Errorf("bad duration %q", v)
		}
		rec.Duration = time.Duration(n) * time.Microsecond
	}
	return nil
}

// str reads the JSON string at line[i] (which must be '"'); the result
// aliases line unless it held escapes, else *buf (decoded into it), so
// that a key and its value each keep their own.
func (p *jsonParser) str(line []byte, i int, buf *[]byte) ([]byte, int, error) {
	if i >= len(line) || line[i] != '"' {
		return nil, i, errors.New("expected a string")
	}
	j := i + 1
	for j < len(line) {
		switch line[j] {
		case '"':
			return line[i+1 : j], j + 1, nil
		case '\\':
			return unescape(line, i, buf)
		}
		j++
	}
	return nil, j, errors.New("unterminated string")
}

// unescape decodes a string with escapes through encoding/json, into
// *buf.
func unescape(line []byte, i int, buf *[]byte) ([]byte, int, error) {
	j := i + 1
	for j < len(line) && line[j] != '"' {
		if line[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(line) {
		return nil, j, errors.New("unterminated string")
	}
	var s string
	if err := json.Unmarshal(line[i:j+1], &s); err != nil {
		return nil, j, err
	}
	*buf = append((*buf)[:0], s...)
	return *buf, j + 1, nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipValue skips a JSON value that is not a string: a number, a literal,
// or an object or array (strings inside them included).
func skipValue(b []byte, i int) (int, error) {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, nil
			}
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		case ',':
			if depth == 0 {
				return i, nil
			}
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			i = j
		case ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i, nil
			}
		}
		i++
	}
	if depth > 0 {
		return i, errors.New("truncated value")
	}
	return i, nil
}

// digitsResolution is the resolution of times written with digits
// fraction digits (at least floor).
func digitsResolution(digits int, floor time.Duration) time.Duration {
	r := time.Second
	for range min(digits, 9) {
		r /= 10
	}
	return max(r, floor)
}
