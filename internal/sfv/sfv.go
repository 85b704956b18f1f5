// Package sfv parses the RFC 9651 structured-field Lists that the
// RateLimit-Policy and RateLimit fields are made of. The tests of every
// front end use it to read back what Floodgate wrote.
package sfv

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Item is one member of an RFC 9651 List of Items as used by the
// RateLimit-Policy and RateLimit fields: a bare value (for these fields a
// String naming the policy) and its parameters in order.
type Item struct {
	// Value is the item's bare value: string, int64, float64, bool, Token
	// or []byte.
	Value any
	// Params are the item's parameters in the order they appeared; a key
	// that appears twice keeps its last value in its first position.
	Params []Param
}

// Param is one parameter of an Item. A parameter written without a value
// has the Boolean value true.
type Param struct {
	Key   string
	Value any
}

// Token is an RFC 9651 Token bare item (unquoted, e.g. foo or *bar).
type Token string

// Param returns the value of the parameter named key, or nil.
func (it *Item) Param(key string) any {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value
		}
	}
	return nil
}

// Int returns the integer parameter named key; ok is false when it is
// missing or not an Integer.
func (it *Item) Int(key string) (v int64, ok bool) {
	v, ok = it.Param(key).(int64)
	return v, ok
}

// Name returns the item's value when it is a String.
func (it *Item) Name() (string, bool) {
	s, ok := it.Value.(string)
	return s, ok
}

// ErrSyntax reports a field value that is not a valid RFC 9651 List of Items.
var ErrSyntax = errors.New("gateway: invalid structured field")

// ErrTooLarge reports a field value with more members or parameters than
// the parser accepts (MaxMembers, MaxParams). RFC 9651 §3.1 and §3.1.2
// let a parser refuse such a field as a whole.
var ErrTooLarge = errors.New("sfv: structured field over a parser limit")

// MaxMembers is the largest number of members ParseList accepts in one
// List, the smallest number RFC 9651 §3.1 requires a parser to support.
// Floodgate writes one member per limit, far fewer.
const MaxMembers = 1024

// MaxParams is the largest number of parameters ParseList accepts on one
// Item, counting each occurrence of a repeated key, the smallest number
// RFC 9651 §3.1.2 requires a parser to support.
const MaxParams = 256

// paramIndexAt is the number of parameters an Item has before its keys
// are indexed in a map: below it a scan of the earlier keys is cheaper
// than hashing, and its cost per parameter stays bounded.
const paramIndexAt = 8

// ParseList parses the value of a structured field that is a List of Items,
// such as RateLimit-Policy or RateLimit (draft-ietf-httpapi-ratelimit-headers
// -10). Several field lines are joined with ", " by the caller, as HTTP
// joins them. Inner lists are rejected: these fields never use them. A List
// of more than MaxMembers members, or an Item with more than MaxParams
// parameters, is refused with ErrTooLarge. The work done is linear in the
// length of s.
func ParseList(s string) ([]Item, error) {
	p := sfParser{s: s}
	return p.list()
}

func (p *sfParser) list() ([]Item, error) {
	p.skipSP()
	var out []Item
	if p.eof() {
		return nil, nil // an empty List
	}
	for {
		if len(out) == MaxMembers {
			return nil, p.tooLarge("a List has more than %d members", MaxMembers)
		}
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ',' after an item")
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, p.errorf("trailing comma")
		}
	}
}

type sfParser struct {
	s string
	i int
	// steps counts the keys looked at or hashed to find duplicate
	// parameters, so that a test can hold the parser to linear work.
	steps int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", ErrSyntax, p.i, fmt.Sprintf(format, args...))
}

func (p *sfParser) tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", ErrTooLarge, p.i, fmt.Sprintf(format, args...))
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (Item, error) {
	if !p.eof() && p.s[p.i] == '(' {
		return Item{}, p.errorf("inner lists are not allowed here")
	}
	v, err := p.bareItem()
	if err != nil {
		return Item{}, err
	}
	it := Item{Value: v}
	// index maps each key to its position in it.Params once the item has
	// paramIndexAt distinct keys, so that finding a duplicate stays O(1).
	var index map[string]int
	seen := 0
	for !p.eof() && p.s[p.i] == ';' {
		if seen == MaxParams {
			return Item{}, p.tooLarge("an item has more than %d parameters", MaxParams)
		}
		seen++
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return Item{}, err
		}
		var val any = true
		if !p.eof() && p.s[p.i] == '=' {
			p.i++
			if val, err = p.bareItem(); err != nil {
				return Item{}, err
			}
		}
		// RFC 9651 §4.2.3.2: a repeated key overwrites the earlier value
		// and keeps the earlier position.
		if j, ok := p.findParam(it.Params, index, key); ok {
			it.Params[j].Value = val
			continue
		}
		it.Params = append(it.Params, Param{Key: key, Value: val})
		switch {
		case index != nil:
			index[key] = len(it.Params) - 1
			p.steps++
		case len(it.Params) == paramIndexAt:
			index = make(map[string]int, 2*paramIndexAt)
			for j, prm := range it.Params {
				index[prm.Key] = j
			}
			p.steps += paramIndexAt
		}
	}
	return it, nil
}

// findParam returns the position of key among params: through index when
// there is one, else by a scan of fewer than paramIndexAt keys.
func (p *sfParser) findParam(params []Param, index map[string]int, key string) (int, bool) {
	if index != nil {
		p.steps++
		j, ok := index[key]
		return j, ok
	}
	for j := range params {
		p.steps++
		if params[j].Key == key {
			return j, true
		}
	}
	return 0, false
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.eof() || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", p.errorf("a key must start with a lowercase letter or '*'")
	}
	for !p.eof() {
		c := p.s[p.i]
		if isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.eof() {
		return nil, p.errorf("missing value")
	}
	c := p.s[p.i]
	switch {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case isAlpha(c) || c == '*':
		return p.token(), nil
	}
	return nil, p.errorf("unexpected %q", c)
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.eof() || !isDigit(p.s[p.i]) {
		return nil, p.errorf("a number needs a digit")
	}
	digits, dot := 0, -1
	for !p.eof() {
		c := p.s[p.i]
		if isDigit(c) {
			digits++
		} else if c == '.' && dot < 0 {
			if digits > 12 {
				return nil, p.errorf("too many integer digits in a decimal")
			}
			dot = digits
		} else {
			break
		}
		p.i++
		if dot < 0 && digits > 15 {
			return nil, p.errorf("an integer has at most 15 digits")
		}
		if dot >= 0 && digits > 15 {
			return nil, p.errorf("a decimal has at most 15 digits")
		}
	}
	text := p.s[start:p.i]
	if dot < 0 {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, p.errorf("bad integer %q", text)
		}
		return n, nil
	}
	if text[len(text)-1] == '.' {
		return nil, p.errorf("a decimal cannot end with '.'")
	}
	if digits-dot > 3 {
		return nil, p.errorf("a decimal has at most 3 fractional digits")
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, p.errorf("bad decimal %q", text)
	}
	return f, nil
}

func (p *sfParser) str() (any, error) {
	p.i++ // opening quote
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() {
				return nil, p.errorf("unterminated escape")
			}
			n := p.s[p.i]
			if n != '"' && n != '\\' {
				return nil, p.errorf("bad escape \\%c", n)
			}
			b.WriteByte(n)
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("byte %#x not allowed in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errorf("unterminated string")
}

func (p *sfParser) bytes() (any, error) {
	p.i++
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.errorf("unterminated byte sequence")
	}
	enc := p.s[p.i : p.i+end]
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
			return nil, p.errorf("byte %#x not allowed in a byte sequence", c)
		}
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, p.errorf("bad base64: %v", err)
	}
	p.i += end + 1
	return b, nil
}

func (p *sfParser) boolean() (any, error) {
	p.i++
	if p.eof() {
		return nil, p.errorf("missing boolean")
	}
	c := p.s[p.i]
	p.i++
	switch c {
	case '1':
		return true, nil
	case '0':
		return false, nil
	}
	return nil, p.errorf("a boolean is ?0 or ?1")
}

func (p *sfParser) token() Token {
	start := p.i
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if c > 0x20 && c < 0x7f && !strings.ContainsRune(`"(),;<=>?@[\]{}`, rune(c)) {
			p.i++
			continue
		}
		break
	}
	return Token(p.s[start:p.i])
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
