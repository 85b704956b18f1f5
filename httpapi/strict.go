package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Strict bodies. encoding/json matches an object's keys to a struct's
// fields ignoring case (Unicode folding: "KEY" and "\u212aey", with a
// Kelvin sign, are "key"), and lets the last of a repeated key win, so
// that {"key":"a","key":"b"} counts "b" while a proxy, a WAF, an audit log
// or the caller's own code that reads the first occurrence, or the exact
// spelling, sees "a". decodeBody refuses both before anything is decoded:
// in every object of a body, a key given twice (compared as decoded, so
// "k\u0065y" is "key") is a duplicate field; in an object read into a
// struct, a key that is not the exact name of one of its fields is an
// unknown field; in an object of free names ("actual"), a key that is not
// exact text (see unquote) is bad_request, as a "key" that is not would
// be, for encoding/json would decode two such keys alike. Every body and
// token the API reads goes through decodeBody, and the parts of it that
// custom UnmarshalJSON methods read again through decodePart, so that no
// site decodes by other rules.

// maxDepth bounds the nesting checkKeys reads. No body of the API nests
// deeper than three (a body, its hits, a hit), so anything past maxDepth
// is refused without reading on, and checkKeys's recursion stays small.
const maxDepth = 32

var (
	// errTrailing reports data after a body's JSON value.
	errTrailing = errors.New("data after the object")
	// errDeep reports a body nested deeper than maxDepth.
	errDeep = fmt.Errorf("nested deeper than %d levels", maxDepth)
	// errScan reports bytes checkKeys cannot read as JSON; decodeBody
	// then lets encoding/json say what is wrong with them.
	errScan = errors.New("a body that is not JSON the key check can read")
)

// lengthError reports an array of more elements than decodeBody takes:
// n of them, at path (such as "hits").
type lengthError struct {
	path    string
	n, most int
}

// Error says how long the array is, and how long it may be.
func (e *lengthError) Error() string {
	what := e.path
	if what == "" {
		what = "elements"
	}
	return fmt.Sprintf("%d %s, at most %d", e.n, what, e.most)
}

// keyError reports a key a strict body may not have, at path (such as
// "hits[1].key"). The wording is encoding/json's, so that every unknown
// field reads alike.
type keyError struct {
	path string
	dup  bool // repeated in its object; else not a field's exact name
}

// Error says what is wrong with the key and where it is.
func (e *keyError) Error() string {
	if e.dup {
		return fmt.Sprintf("json: duplicate field %q", e.path)
	}
	return fmt.Sprintf("json: unknown field %q", e.path)
}

// decodeBody decodes b, a whole request body or reservation token that
// holds one JSON value, into v, a pointer to the struct that reads it:
// the keys are checked first (checkKeys, against the fields of v's type),
// and an array of more than most elements (the hits of a request) is
// refused as a *lengthError before anything is decoded (decoding makes a value, and for a hit a decoder, of every
// element: 64 KiB of empty hits took 22 MiB); then encoding/json decodes
// with unknown fields refused and numbers kept as json.Number, and
// nothing but space may follow the value.
func decodeBody(b []byte, v any, most int) error {
	keyErr := checkKeys(b, shapeFor(reflect.TypeOf(v)), most)
	if keyErr != nil && !errors.Is(keyErr, errScan) {
		return keyErr
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errTrailing
	}
	// JSON that encoding/json read and checkKeys could not: refuse it
	// rather than take keys nobody checked.
	return keyErr
}

// decodePart decodes b, a part of a body that decodeBody checked (a hit,
// the actual costs of a settle), into v, with unknown fields refused and
// numbers kept as json.Number.
func decodePart(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	return dec.Decode(v)
}

// shape is what checkKeys expects of a JSON value: an object read into a
// struct (its fields, by their exact JSON names), an array of values of
// one shape, or, as a nil *shape, any value (an object in it has free
// names).
type shape struct {
	object bool
	fields []field
	array  bool
	elem   *shape
}

// field is a struct field as JSON names it.
type field struct {
	name  string
	shape *shape
}

// lookup returns the index of the field named exactly name, or -1.
func (s *shape) lookup(name []byte) int {
	for i := range s.fields {
		if string(name) == s.fields[i].name {
			return i
		}
	}
	return -1
}

// shapes caches shapeFor by type.
var shapes sync.Map // reflect.Type → *shape

// shapeFor returns the shape of the JSON that encoding/json decodes into
// a value of type t: the JSON names of its fields as their tags give
// them (a type with its own UnmarshalJSON keeps the tags of the form it
// reads), json.RawMessage, maps and interfaces as any value.
func shapeFor(t reflect.Type) *shape {
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	s := shapeOf(t, map[reflect.Type]*shape{})
	shapes.Store(t, s)
	return s
}

var rawMessage = reflect.TypeFor[json.RawMessage]()

// shapeOf is shapeFor without the cache; memo holds the shapes under
// construction, so that a recursive type ends.
func shapeOf(t reflect.Type, memo map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := memo[t]; ok {
		return s
	}
	switch {
	case t == rawMessage:
		return nil
	case t.Kind() == reflect.Struct:
		s := &shape{object: true}
		memo[t] = s
		s.fields = structFields(nil, t, memo)
		return s
	case t.Kind() == reflect.Array, t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8:
		s := &shape{array: true}
		memo[t] = s
		s.elem = shapeOf(t.Elem(), memo)
		return s
	}
	return nil
}

// structFields appends the JSON fields of struct type t to fs: its own
// first, then those of its embedded structs not named already (as
// encoding/json, the shallower field wins).
func structFields(fs []field, t reflect.Type, memo map[reflect.Type]*shape) []field {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			embedded = append(embedded, ft)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs = append(fs, field{name: name, shape: shapeOf(f.Type, memo)})
	}
	for _, et := range embedded {
		for _, f := range structFields(nil, et, memo) {
			if !hasField(fs, f.name) {
				fs = append(fs, f)
			}
		}
	}
	return fs
}

// hasField reports whether fs has a field named name.
func hasField(fs []field, name string) bool {
	for _, f := range fs {
		if f.name == name {
			return true
		}
	}
	return false
}

// checkKeys reads the JSON value at the start of b as sh expects it and
// returns the first key that breaks the rule (a *keyError, or an
// *errField for a free name that is not exact text), the first array of
// more than most elements (a *lengthError), errDeep, errScan for bytes
// that are not JSON it can read, or nil. It allocates nothing for a body
// that keeps the rule and has no escapes in its keys.
func checkKeys(b []byte, sh *shape, most int) error {
	s := scanner{b: b, most: most}
	return s.value(sh, 0)
}

// scanner reads JSON for checkKeys. It checks keys, not spelling: numbers
// and literals are taken as runs of their bytes, for encoding/json checks
// them after it.
type scanner struct {
	b    []byte
	i    int
	most int // the elements an array may have (0: any number)
}

// space skips JSON white space.
func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value reads one value of shape sh at nesting depth.
func (s *scanner) value(sh *shape, depth int) error {
	s.space()
	if s.i >= len(s.b) {
		return errScan
	}
	switch s.b[s.i] {
	case '{', '[':
		if depth >= maxDepth {
			return errDeep
		}
		if s.b[s.i] == '{' {
			return s.object(sh, depth+1)
		}
		return s.array(sh, depth+1)
	case '"':
		_, _, err := s.str()
		return err
	}
	start := s.i
	for s.i < len(s.b) && isLiteral(s.b[s.i]) {
		s.i++
	}
	if s.i == start {
		return errScan
	}
	return nil
}

// isLiteral reports a byte of a number, true, false or null.
func isLiteral(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.'
}

// str reads a string; lit is it with its quotes, escaped whether it has a
// backslash. It reads each byte a bounded number of times, however many
// escapes the string has.
func (s *scanner) str() (lit []byte, escaped bool, err error) {
	start := s.i
	i, q := start+1, -1 // q: the next quote at or after i
	for {
		if q < i {
			j := bytes.IndexByte(s.b[i:], '"')
			if j < 0 {
				return nil, false, errScan
			}
			q = i + j
		}
		k := bytes.IndexByte(s.b[i:q], '\\')
		if k < 0 {
			s.i = q + 1
			return s.b[start:s.i], escaped, nil
		}
		// Skip the escaped byte (a \u's digits are plain bytes); when it
		// is the quote, look for the next one.
		escaped = true
		i += k + 2
	}
}

// object reads an object: of sh's fields when sh is a struct's shape,
// else of free names.
func (s *scanner) object(sh *shape, depth int) error {
	s.i++ // {
	strict := sh != nil && sh.object
	var seenBits [1]uint64 // the fields of a strict object given so far
	seen := seenBits[:]
	if strict && len(sh.fields) > 64 {
		seen = make([]uint64, (len(sh.fields)+63)/64)
	}
	var free keySet // the keys of a free object given so far
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return errScan
		}
		lit, escaped, err := s.str()
		if err != nil {
			return err
		}
		name := lit[1 : len(lit)-1]
		if escaped || !strict && invalidUTF8(name) >= 0 {
			// The key as encoding/json decodes it, when it decodes
			// exactly; else no field's name, and no free name either.
			text, err := unquote(lit)
			if err != nil {
				if strict {
					return &keyError{path: string(name)}
				}
				return &errField{field: string(name), err: err}
			}
			name = []byte(text)
		}
		var sub *shape
		if strict {
			f := sh.lookup(name)
			if f < 0 {
				return &keyError{path: string(name)}
			}
			if seen[f/64]&(1<<(f%64)) != 0 {
				return &keyError{path: string(name), dup: true}
			}
			seen[f/64] |= 1 << (f % 64)
			sub = sh.fields[f].shape
		} else if !free.add(name) {
			return &keyError{path: string(name), dup: true}
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errScan
		}
		s.i++
		if err := s.value(sub, depth); err != nil {
			return within(err, string(name))
		}
		s.space()
		if s.i >= len(s.b) {
			return errScan
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errScan
		}
	}
}

// array reads an array, of values of sh's element shape when sh is an
// array's.
func (s *scanner) array(sh *shape, depth int) error {
	s.i++ // [
	var elem *shape
	if sh != nil && sh.array {
		elem = sh.elem
	}
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		if err := s.value(elem, depth); err != nil {
			return within(err, "["+strconv.Itoa(n)+"]")
		}
		s.space()
		if s.i >= len(s.b) {
			return errScan
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			if s.most > 0 && n >= s.most {
				return &lengthError{n: n + 1, most: s.most}
			}
			return nil
		default:
			return errScan
		}
	}
}

// within puts the path of a key error under seg, a key or an index.
func within(err error, seg string) error {
	join := func(path string) string {
		switch {
		case path == "":
			return seg
		case path[0] == '[':
			return seg + path
		}
		return seg + "." + path
	}
	switch e := err.(type) {
	case *keyError:
		e.path = join(e.path)
	case *errField:
		e.field = join(e.field)
	case *lengthError:
		e.path = join(e.path)
	}
	return err
}

// keySet holds the keys of a free object, decoded; a few in place, more
// in a map, so that an object of many keys costs no more than one lookup
// each.
type keySet struct {
	few  [8][]byte
	n    int
	many map[string]struct{}
}

// add adds key and reports whether it was not there yet.
func (k *keySet) add(key []byte) bool {
	if k.many != nil {
		if _, ok := k.many[string(key)]; ok {
			return false
		}
		k.many[string(key)] = struct{}{}
		return true
	}
	for _, x := range k.few[:k.n] {
		if bytes.Equal(x, key) {
			return false
		}
	}
	if k.n < len(k.few) {
		k.few[k.n] = key
		k.n++
		return true
	}
	k.many = make(map[string]struct{}, 2*len(k.few))
	for _, x := range k.few {
		k.many[string(x)] = struct{}{}
	}
	k.many[string(key)] = struct{}{}
	return true
}
