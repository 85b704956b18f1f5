package yamlfile

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxNodes bounds the values of one file, aliases expanded.
const MaxNodes = 1 << 18

// MaxValueBytes bounds the bytes of the scalars (values and field names)
// of one file, aliases expanded: an alias is one value, but naming a
// scalar of a megabyte in a thousand places must not make a thousand
// copies of it (in field paths, descriptor names and messages).
const MaxValueBytes = MaxFileSize

// MaxDepth bounds how deep the values of a file are nested (a mapping's
// field or a list's entry is one level below it, so that a descriptor
// file's descriptors may nest 34 levels deep, each with all its fields):
// the field path of a value grows with its depth, and aliases can nest a
// file deeper than it is written.
const MaxDepth = 72

// Positions maps field paths ("limits[2].burst", "" for the document) to
// the positions of the values written there.
type Positions map[string]Pos

// Has reports whether the field was written in the file.
func (p Positions) Has(field string) bool {
	_, ok := p[field]
	return ok
}

// Of returns the position of the value at field or, when it was not
// written, of its nearest written parent, and finally of the document.
func (p Positions) Of(field string) Pos {
	for {
		if pos, ok := p[field]; ok {
			return pos
		}
		if field == "" {
			return Pos{}
		}
		i := lastSep(field)
		if i < 0 {
			i = 0
		}
		field = field[:i]
	}
}

// lastSep is the index of the last '.' or '[' in a field path, or -1.
func lastSep(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' || s[i] == '[' {
			return i
		}
	}
	return -1
}

// Join appends a field name to a path.
func Join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// A Hook decodes n into v, a settable value of a type with a YAML shape of
// its own (a key that is a string or a list, a delay that is a number or
// "nodelay"). It reports problems with d.ErrorAt and may call d.Decode for
// the parts it does not decode itself.
type Hook func(d *Decoder, n *yaml.Node, v reflect.Value, path string)

// Decoder stores YAML node trees into Go values by their yaml tags (a tag
// "-" or no tag skips a field; ",inline" inlines a struct), recording the
// position of every value it sees and collecting every problem instead of
// stopping at the first. Strings take any scalar, numbers are whole
// decimal numbers (with optional _ separators), booleans are true or false
// unquoted (True, TRUE, False and FALSE too; see Bool and YAML11Bools),
// and time.Duration values are Go durations such as 500ms or 24h. A null
// value keeps what the field holds. A Decoder is for one file and one
// goroutine.
type Decoder struct {
	file  string
	hooks map[reflect.Type]Hook
	pos   Positions
	errs  Errors
	// bad marks the fields with a problem, so that Errorf reports one
	// problem per field.
	bad map[string]bool
	// nodes counts the values decoded, aliases expanded: a few aliases can
	// name a huge tree, which must not hang the decoder.
	nodes int
	// bytes counts the bytes of the scalars decoded, aliases expanded.
	bytes int
	// depth is how deep the value now decoded is nested.
	depth int
	// overflow is the problem reported when nodes passed MaxNodes or
	// bytes MaxValueBytes.
	overflow *Error
	// YAML11Bools, when set, also reads YAML 1.1's booleans (yes, no, on,
	// off, y, n) as gopkg.in/yaml.v2 does (Bool).
	YAML11Bools bool
	// Twice, when set, takes a field given twice in one mapping instead of
	// refusing it: the later value is decoded over the earlier one (a
	// mapping's fields merge, as gopkg.in/yaml.v2 decodes them), and Twice
	// is told where, for a warning.
	Twice func(at *Error)
}

// NewDecoder returns a decoder for the file name (used in messages) with
// hooks for the types that have their own shape.
func NewDecoder(name string, hooks map[reflect.Type]Hook) *Decoder {
	return &Decoder{file: name, hooks: hooks, pos: Positions{}, bad: map[string]bool{}}
}

// File returns the file's name.
func (d *Decoder) File() string { return d.file }

// Positions returns where each decoded field path was written.
func (d *Decoder) Positions() Positions { return d.pos }

// Written reports whether the field at path was in the file.
func (d *Decoder) Written(path string) bool { return d.pos.Has(path) }

// TooLarge reports whether the file has more than MaxNodes values once its
// aliases are expanded; decoding then stopped.
func (d *Decoder) TooLarge() bool { return d.overflow != nil }

// Problems returns the problems recorded so far, in the order they were
// found. When the file is too large only that problem is returned:
// checking a partial file of that size says nothing useful.
func (d *Decoder) Problems() Errors {
	if d.overflow != nil {
		return Errors{d.overflow}
	}
	return d.errs
}

// Err returns nil or the Errors of the file, Sorted.
func (d *Decoder) Err() error {
	errs := d.Problems()
	if len(errs) == 0 {
		return nil
	}
	return slices.Clone(errs).Sorted()
}

// ErrorAt records a problem of the value n at the field path. A string
// or error among args longer than 1 KiB is shown by its first 128 bytes
// and its length (shown).
func (d *Decoder) ErrorAt(n *yaml.Node, field, format string, args ...any) {
	e := &Error{File: d.file, Field: field, Msg: fmt.Sprintf(format, shown(args)...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.bad[field] = true
	d.errs = append(d.errs, e)
}

// Errorf records a problem of the field at its position (or its nearest
// written parent's), unless the field has a problem already: a bad
// duration need not also be reported as a missing one.
func (d *Decoder) Errorf(field, format string, args ...any) {
	d.ErrorOf(field, field, format, args...)
}

// ErrorOf is Errorf with the position of the field at path at instead.
func (d *Decoder) ErrorOf(at, field, format string, args ...any) {
	if d.bad[field] {
		return
	}
	d.bad[field] = true
	p := d.pos.Of(at)
	d.errs = append(d.errs, &Error{File: d.file, Line: p.Line, Column: p.Column, Field: field,
		Msg: fmt.Sprintf(format, shown(args)...)})
}

// Count counts n, a value at the field path, against the MaxNodes values
// a file may have, aliases expanded, as Decode counts each value it
// decodes; a hook that walks a node tree itself (aliases followed) counts
// each value it meets. Once the file has more, Count reports false, the
// decoder stops and TooLarge reports true, with the problem at the first
// value past the bound.
func (d *Decoder) Count(n *yaml.Node, path string) bool {
	if d.overflow != nil {
		return false
	}
	if d.nodes++; d.nodes > MaxNodes {
		d.tooLarge(n, path, fmt.Sprintf("the file has more than %d values once its aliases are expanded", MaxNodes))
		return false
	}
	if n != nil && n.Kind == yaml.ScalarNode {
		return d.countBytes(n, path, len(n.Value))
	}
	return true
}

// countBytes counts size bytes of the scalar n at path against
// MaxValueBytes, as Count does values.
func (d *Decoder) countBytes(n *yaml.Node, path string, size int) bool {
	if d.overflow != nil {
		return false
	}
	if d.bytes += size; d.bytes > MaxValueBytes {
		d.tooLarge(n, path, fmt.Sprintf("the file has more than %d bytes of values once its aliases are expanded", MaxValueBytes))
		return false
	}
	return true
}

func (d *Decoder) tooLarge(n *yaml.Node, path, msg string) {
	d.overflow = &Error{File: d.file, Field: path, Msg: msg}
	if n != nil {
		d.overflow.Line, d.overflow.Column = n.Line, n.Column
	}
}

// Resolve follows aliases and unwraps a document node.
func Resolve(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && depth < 32; depth++ {
		switch n.Kind {
		case yaml.AliasNode:
			n = n.Alias
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		default:
			return n
		}
	}
	return n
}

// IsNull reports whether n is missing or a null scalar.
func IsNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// KindName describes a node for messages: a mapping, a list, null or the
// quoted scalar.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", show(n.Value))
	}
	return "an unexpected node"
}

var durationType = reflect.TypeOf(time.Duration(0))

// Decode stores n into v (a settable value), reporting problems at path.
func (d *Decoder) Decode(n *yaml.Node, v reflect.Value, path string) {
	n = Resolve(n)
	if n == nil || !d.Count(n, path) {
		return
	}
	if d.depth > MaxDepth {
		d.ErrorAt(n, path, "nested more than %d levels deep", MaxDepth)
		return
	}
	d.pos[path] = Pos{n.Line, n.Column}
	if h := d.hooks[v.Type()]; h != nil {
		h(d, n, v, path)
		return
	}
	if IsNull(n) {
		return // keep the default
	}
	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode {
			d.ErrorAt(n, path, "want a duration such as 500ms, 30s or 5m, got %s", KindName(n))
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil || dur < 0 {
			d.ErrorAt(n, path, "bad duration %q: want a non-negative Go duration such as 500ms, 30s, 5m or 24h", n.Value)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.Decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.ErrorAt(n, path, "want a list, got %s", KindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		d.depth++
		for i, c := range n.Content {
			d.Decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		d.depth--
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.ErrorAt(n, path, "want a string, got %s", KindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		b, ok := Bool(n, d.YAML11Bools)
		if !ok {
			d.ErrorAt(n, path, "%s", d.boolProblem(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Kind != yaml.ScalarNode {
			d.ErrorAt(n, path, "want a whole number, got %s", KindName(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, v.Type().Bits())
		if err != nil {
			d.ErrorAt(n, path, "want a whole number, got %q", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode {
			d.ErrorAt(n, path, "want a number, got %s", KindName(n))
			return
		}
		x, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			d.ErrorAt(n, path, "want a number, got %q", n.Value)
			return
		}
		v.SetFloat(x)
	default:
		d.ErrorAt(n, path, "internal: cannot decode into %s", v.Type())
	}
}

// The spellings of a boolean: YAML 1.2's core schema (as go.yaml.in/yaml/v3
// reads it) and those that YAML 1.1 adds (as gopkg.in/yaml.v2 reads them).
var (
	coreBools   = map[string]bool{"true": true, "True": true, "TRUE": true, "false": false, "False": false, "FALSE": false}
	yaml11Bools = map[string]bool{"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
		"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false}
)

// Bool reads the scalar n as a boolean: true, True, TRUE, false, False or
// FALSE written plain (YAML 1.2's core schema), or tagged !!bool. With
// yaml11 it also reads YAML 1.1's y, yes, on, n, no and off (each
// lowercase, capitalised or uppercase) written plain or tagged !!bool, as
// gopkg.in/yaml.v2 reads a bool. Anything else is not a boolean: a quoted
// "true" is a string, 1 a number, and t or tRuE a string, as both YAML
// libraries read them.
func Bool(n *yaml.Node, yaml11 bool) (value, ok bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return false, false
	}
	switch {
	case n.Tag == "!!bool":
		// Plain true and false resolve to !!bool, and so does any scalar
		// with an explicit !!bool tag, quoted or not.
	case yaml11 && n.Tag == "!!str" && n.Style == 0:
		// YAML 1.2 resolves a plain yes to a string; YAML 1.1 to true.
	default:
		return false, false
	}
	if b, ok := coreBools[n.Value]; ok {
		return b, true
	}
	if b, ok := yaml11Bools[n.Value]; ok && yaml11 {
		return b, true
	}
	return false, false
}

// boolProblem says why n, not a boolean, was refused where one belongs.
func (d *Decoder) boolProblem(n *yaml.Node) string {
	want := "want true or false"
	if d.YAML11Bools {
		want += " (or yes, no, on, off, y, n)"
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Sprintf("%s, got %s", want, KindName(n))
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		plain := *n
		plain.Style, plain.Tag = 0, "!!bool"
		if _, ok := Bool(&plain, d.YAML11Bools); ok {
			return fmt.Sprintf("%s, got the quoted string %q: a boolean is written without quotes", want, show(n.Value))
		}
	}
	return fmt.Sprintf("%s, got %q", want, show(n.Value))
}

// fieldInfo is one YAML key of a struct, possibly inside an inlined struct.
type fieldInfo struct {
	name  string
	index []int
}

// fieldsOf holds the fields of every struct type decoded so far
// (reflect.Type to []fieldInfo): a type's fields are worked out once, not
// at each of its mappings. The slices are never changed once stored.
var fieldsOf sync.Map

// structFields lists the YAML keys of the struct type t, inlined structs
// included.
func structFields(t reflect.Type) []fieldInfo {
	if f, ok := fieldsOf.Load(t); ok {
		return f.([]fieldInfo)
	}
	f := listFields(t)
	fieldsOf.Store(t, f)
	return f
}

// listFields is structFields, worked out.
func listFields(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" || tag == "" {
			continue
		}
		name, opt, _ := strings.Cut(tag, ",")
		if opt == "inline" {
			for _, sub := range structFields(f.Type) {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		out = append(out, fieldInfo{name: name, index: []int{i}})
	}
	return out
}

func (d *Decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.ErrorAt(n, path, "want a mapping, got %s", KindName(n))
		return
	}
	fields := structFields(v.Type())
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := Resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.ErrorAt(n.Content[i], path, "want a field name, got %s", KindName(n.Content[i]))
			continue
		}
		if !d.countBytes(k, path, len(k.Value)) {
			return
		}
		if k.Value == "<<" {
			d.ErrorAt(k, path, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		fp := Join(path, k.Value)
		var fi *fieldInfo
		for j := range fields {
			if fields[j].name == k.Value {
				fi = &fields[j]
				break
			}
		}
		if fi == nil {
			d.ErrorAt(k, fp, "unknown field%s", suggest(k.Value, fields))
			continue
		}
		if seen[k.Value] {
			if d.Twice == nil {
				d.ErrorAt(k, fp, "field given twice")
				continue
			}
			d.Twice(&Error{File: d.file, Line: k.Line, Column: k.Column, Field: fp,
				Msg: "given twice: the later value is decoded over the earlier one"})
		}
		seen[k.Value] = true
		d.depth++
		d.Decode(val, v.FieldByIndex(fi.index), fp)
		d.depth--
	}
}

// suggest names the known field closest to an unknown one, if any is close.
func suggest(name string, fields []fieldInfo) string {
	best, bestD := "", 3
	for _, f := range fields {
		if dist := editDistance(name, f.name); dist < bestD {
			best, bestD = f.name, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between two short strings.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Bad reports whether a problem was recorded at the field.
func (d *Decoder) Bad(field string) bool { return d.bad[field] }
