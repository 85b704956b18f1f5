package replay

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// csvColumn is what one column of a CSV log holds.
type csvColumn struct {
	kind   fieldKind
	header string
	unit   time.Duration // of a duration column; for a time column, 0
}

// csvParser reads a CSV log whose first line names its columns (any
// order, any case; unknown columns are skipped):
//
//	time (or timestamp, ts): RFC 3339, or Unix seconds with a fraction
//	ip (client_ip, remote_addr): the client's address
//	method, host, path (or uri, url: the query is dropped), status
//	duration_ms, duration_us, duration (seconds), request_time (seconds)
//	key (key_name): the API key's name as Floodgate logs it
//	api_key: the raw API key (hashed like a request's, never shown)
//	user, limit, decision (allow, deny, none)
//	header:NAME: any other request header
type csvParser struct {
	cols   []csvColumn
	denied []int
	in     *interner
	digits int
	rec    []string
}

var csvNames = map[string]csvColumn{
	"time": {kind: fStartTime}, "timestamp": {kind: fStartTime}, "ts": {kind: fStartTime},
	"ip": {kind: fClientIP}, "client_ip": {kind: fClientIP}, "remote_addr": {kind: fClientIP},
	"method": {kind: fMethod}, "host": {kind: fHost},
	"path": {kind: fPath}, "uri": {kind: fRawPath}, "url": {kind: fRawPath},
	"status":      {kind: fStatus},
	"duration_ms": {kind: fDurationMs, unit: time.Millisecond}, "duration_us": {kind: fDurationMs, unit: time.Microsecond},
	"duration": {kind: fRequestTime}, "request_time": {kind: fRequestTime},
	"key": {kind: fKey}, "key_name": {kind: fKey}, "api_key": {kind: fAPIKey},
	"user": {kind: fUser}, "limit": {kind: fLimit}, "decision": {kind: fDecision},
}

// newCSVParser reads the header line.
func newCSVParser(header []byte, denied []int, in *interner) (*csvParser, error) {
	names, err := csv.NewReader(bytes.NewReader(header)).Read()
	if err != nil {
		return nil, fmt.Errorf("replay: csv header: %w", err)
	}
	p := &csvParser{denied: denied, in: in}
	var has [numFieldKinds]bool
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		c, ok := csvNames[n]
		if h, isHdr := strings.CutPrefix(n, "header:"); isHdr {
			c, ok = csvColumn{kind: fHeader, header: http.CanonicalHeaderKey(h)}, true
		}
		if !ok {
			c = csvColumn{kind: fIgnore}
		}
		has[c.kind] = true
		p.cols = append(p.cols, c)
	}
	if !has[fStartTime] || !has[fMethod] || (!has[fPath] && !has[fRawPath]) {
		return nil, errors.New("replay: csv header: the columns time, method and path are required")
	}
	return p, nil
}

func (p *csvParser) resolution() time.Duration { return digitsResolution(p.digits, time.Microsecond) }

func (p *csvParser) parse(line []byte, rec *Record) error {
	r := csv.NewReader(bytes.NewReader(line))
	r.ReuseRecord = true
	fs, err := r.Read()
	if err == io.EOF {
		return errSkip
	}
	if err != nil {
		return err
	}
	if len(fs) != len(p.cols) {
		return fmt.Errorf("%d columns, the header has %d", len(fs), len(p.cols))
	}
	haveTime, haveDecision := false, false
	for i, v := range fs {
		c := &p.cols[i]
		v = strings.TrimSpace(v)
		if v == "" || v == "-" {
			continue
		}
		switch c.kind {
		case fStartTime:
			ns, digits, ok := parseRFC3339([]byte(v))
			if !ok {
				if ns, digits, ok = parseSeconds([]byte(v)); !ok {
					return fmt.Errorf("bad time %q", v)
				}
			}
			rec.Time, haveTime = ns, true
			p.digits = max(p.digits, digits)
		case fClientIP:
			a, err := p.in.addr([]byte(v))
			if err != nil {
				return err
			}
			rec.ClientIP = a
		case fMethod:
			rec.Method = p.in.method([]byte(strings.ToUpper(v)))
		case fHost:
			rec.Host = p.in.str([]byte(v))
		case fPath:
			rec.Path = stripQuery(v)
		case fRawPath:
			setTarget(rec, v)
		case fStatus:
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("bad status %q", v)
			}
			rec.Status = n
		case fDurationMs:
			n, err := strconv.ParseFloat(v, 64)
			d := n * float64(c.unit)
			// NaN fails both comparisons.
			if err != nil || !(d >= 0 && d <= float64(maxDuration)) {
				return fmt.Errorf("bad duration %q", v)
			}
			rec.Duration = time.Duration(d)
		case fRequestTime:
			ns, _, ok := parseSeconds([]byte(v))
			if !ok {
				return fmt.Errorf("bad duration %q", v)
			}
			rec.Duration = time.Duration(ns)
		case fKey:
			rec.Key = p.in.str([]byte(v))
		case fAPIKey:
			rec.APIKey = v
		case fHeader:
			rec.Headers = append(rec.Headers, Header{Name: c.header, Value: p.in.str([]byte(v))})
		case fUser:
			rec.User = p.in.str([]byte(v))
		case fLimit:
			rec.Limit = p.in.str([]byte(v))
		case fDecision:
			d, err := accesslog.ParseDecision(strings.ToLower(v))
			if err != nil {
				return err
			}
			haveDecision = true
			rec.Logged = LoggedAllow
			if d == accesslog.Deny {
				rec.Logged = LoggedDeny
			}
		}
	}
	if !haveTime {
		return errors.New("no time")
	}
	if !haveDecision && rec.Status != 0 {
		rec.Logged = LoggedAllow
		for _, s := range p.denied {
			if rec.Status == s {
				rec.Logged = LoggedDeny
			}
		}
	}
	return nil
}
