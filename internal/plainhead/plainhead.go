// Package plainhead reads the head of a plain HTTP/1.1 request: a GET
// without a body, its lines ended by CRLF, a target of visible ASCII that
// begins with "/", one Host of lower-case letters, digits, dots and
// hyphens (and a port), and field lines of a token, a colon and visible
// ASCII, none of the fields that an HTTP server reads its own way (a
// body's, Expect, Upgrade, Cookie, Trailer, a second User-Agent or
// Connection, a Connection other than keep-alive or close). Nearly every
// client's request is one, and so is every flood's.
//
// Read keeps each field line as offsets into the head and copies nothing;
// Header reads the fields as the gateway reads a request's
// (identity.Header, gateway.LineCounter, gateway.NameLister). A head that
// is not plain is left to a full HTTP parser.
package plainhead

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/floodgate/floodgate/gateway"
)

// Request is what Read takes from a plain request's line and fields. Its
// slices and strings are views of the head.
type Request struct {
	// Target is the request target, as sent.
	Target []byte
	// Host is the Host field's value.
	Host string
	// Override says a method override field is there (X-HTTP-Method...,
	// X-Method-Override...).
	Override bool
	// Close says the request asks to close the connection after its
	// answer (Connection: close).
	Close bool
}

// Header is a plain request's field lines as offsets into its head: the
// start and end of the name, of the value. Its zero value is ready for
// Read, which reuses its room from one head to the next.
type Header struct {
	head  []byte
	lines [][4]int32
}

// Read reads head, a request's head up to and including the empty line
// that ends it, into h, and reports whether the request is plain (the
// package documentation). h reads the head's bytes until they change.
func Read(head []byte, h *Header) (r Request, ok bool) {
	if len(head) < 18 || string(head[:5]) != "GET /" || len(head) > 1<<30 {
		return r, false
	}
	i := 4
	for i < len(head) && head[i] > ' ' && head[i] < 0x7f {
		i++
	}
	r.Target = head[4:i]
	if len(head)-i < 11 || string(head[i:i+11]) != " HTTP/1.1\r\n" {
		return r, false
	}
	p := i + 11
	h.head, h.lines = head, h.lines[:0]
	hosts, agents, conns := 0, 0, 0
	for {
		if len(head)-p < 2 {
			return r, false
		}
		if head[p] == '\r' {
			if head[p+1] != '\n' || p+2 != len(head) || hosts != 1 || agents > 1 || conns > 1 {
				return r, false
			}
			return r, true
		}
		n, nameEnd, valueStart, valueEnd, ok := FieldLine(head[p:])
		if !ok {
			return r, false
		}
		ns, ne, vs, ve := p, p+nameEnd, p+valueStart, p+valueEnd
		p += n
		name, value := head[ns:ne], head[vs:ve]
		switch len(name) {
		case 4:
			if bytes.EqualFold(name, []byte("host")) {
				if !PlainHost(value) {
					return r, false
				}
				hosts++
				r.Host = b2s(value)
			}
		case 6:
			if bytes.EqualFold(name, []byte("cookie")) || bytes.EqualFold(name, []byte("expect")) {
				return r, false
			}
		case 7:
			if bytes.EqualFold(name, []byte("upgrade")) || bytes.EqualFold(name, []byte("trailer")) {
				return r, false
			}
		case 10:
			if bytes.EqualFold(name, []byte("connection")) {
				switch string(value) {
				case "close":
					r.Close = true
				case "keep-alive":
				default:
					return r, false
				}
				conns++
			} else if bytes.EqualFold(name, []byte("user-agent")) {
				agents++
			}
		case 12:
			if bytes.EqualFold(name, []byte("content-type")) {
				return r, false
			}
		case 14:
			if bytes.EqualFold(name, []byte("content-length")) {
				return r, false
			}
		case 17:
			if bytes.EqualFold(name, []byte("transfer-encoding")) {
				return r, false
			}
		}
		if IsOverride(name) {
			r.Override = true
		}
		h.lines = append(h.lines, [4]int32{int32(ns), int32(ne), int32(vs), int32(ve)})
	}
}

// FieldLine reads the field line that b begins with, as Read reads one
// (of a request or an answer): a token, a colon, optional white space, a
// value of visible ASCII, spaces and tabs, CRLF. It returns the line's
// length, CRLF included, where its name ends, and where its value, without
// the white space around it, begins and ends; ok is false for anything
// else.
func FieldLine(b []byte) (n, nameEnd, valueStart, valueEnd int, ok bool) {
	p := 0
	for p < len(b) && tokenChar[b[p]] {
		p++
	}
	if p == 0 || p == len(b) || b[p] != ':' {
		return 0, 0, 0, 0, false
	}
	nameEnd = p
	p++
	for p < len(b) && (b[p] == ' ' || b[p] == '\t') {
		p++
	}
	valueStart = p
	for p < len(b) && (b[p] >= ' ' && b[p] < 0x7f || b[p] == '\t') {
		p++
	}
	if len(b)-p < 2 || b[p] != '\r' || b[p+1] != '\n' {
		return 0, 0, 0, 0, false
	}
	valueEnd = p
	for valueEnd > valueStart && (b[valueEnd-1] == ' ' || b[valueEnd-1] == '\t') {
		valueEnd--
	}
	return p + 2, nameEnd, valueStart, valueEnd, true
}

// PlainHost reports whether h is a host of lowercase letters, digits,
// dots and hyphens, with or without a port of digits after one colon.
func PlainHost(h []byte) bool {
	if len(h) == 0 {
		return false
	}
	colon := false
	for _, c := range h {
		switch {
		case '0' <= c && c <= '9':
		case colon:
			return false
		case 'a' <= c && c <= 'z' || c == '.' || c == '-':
		case c == ':':
			colon = true
		default:
			return false
		}
	}
	return true
}

// IsOverride reports whether a field name is one of a method override
// (X-HTTP-Method, X-HTTP-Method-Override, X-Method-Override, in any case),
// which the gateway reads only where it honours one.
func IsOverride(name []byte) bool {
	return len(name) >= 13 && (name[0] == 'X' || name[0] == 'x') &&
		(hasPrefixFold(name[1:], "-http-method") || hasPrefixFold(name[1:], "-method-override"))
}

// Token reports whether c may be a byte of a token (a field name, RFC
// 9110 §5.6.2).
func Token(c byte) bool { return tokenChar[c] }

var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(b2s(b[:len(prefix)]), prefix)
}

func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (h *Header) is(ln [4]int32, name string) bool {
	return int(ln[1]-ln[0]) == len(name) && strings.EqualFold(b2s(h.head[ln[0]:ln[1]]), name)
}

// Get returns the first value of a field, or "".
func (h *Header) Get(name string) string {
	for _, ln := range h.lines {
		if h.is(ln, name) {
			return b2s(h.head[ln[2]:ln[3]])
		}
	}
	return ""
}

// Values returns every value of a field, one per line.
func (h *Header) Values(name string) []string {
	var out []string
	for _, ln := range h.lines {
		if h.is(ln, name) {
			out = append(out, b2s(h.head[ln[2]:ln[3]]))
		}
	}
	return out
}

// Lines counts the lines of a field (gateway.LineCounter).
func (h *Header) Lines(name string) int {
	n := 0
	for _, ln := range h.lines {
		if h.is(ln, name) {
			n++
		}
	}
	return n
}

// FindName returns the first field name, as it came, that m matches, or
// "" (gateway.NameLister).
func (h *Header) FindName(m *gateway.NameMatch) string {
	for _, ln := range h.lines {
		if k := b2s(h.head[ln[0]:ln[1]]); m.Matches(k) {
			return k
		}
	}
	return ""
}

// Names calls yield with each field name, as it came, in order.
func (h *Header) Names(yield func(name string) bool) {
	for _, ln := range h.lines {
		if !yield(b2s(h.head[ln[0]:ln[1]])) {
			return
		}
	}
}

// Len returns the number of field lines.
func (h *Header) Len() int { return len(h.lines) }

// Field returns the i-th field line's name and value, as they came, and
// the whole line, from its name to its CRLF included.
func (h *Header) Field(i int) (name, value, line []byte) {
	ln := h.lines[i]
	end := len(h.head) - 2 // the empty line's
	if i+1 < len(h.lines) {
		end = int(h.lines[i+1][0])
	}
	return h.head[ln[0]:ln[1]], h.head[ln[2]:ln[3]], h.head[ln[0]:end]
}

var (
	_ gateway.LineCounter = (*Header)(nil)
	_ gateway.NameLister  = (*Header)(nil)
)
