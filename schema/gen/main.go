// Command gen writes floodgate.schema.json, the JSON Schema of the policy
// file, from the types of package config: the fields and their types come
// from the structs (by their yaml tags, as the decoder reads them), the
// enumerations from the Go values (floodgate.Algorithms, config.Choices
// ...), and what no type says (descriptions, defaults, bounds, patterns)
// from the notes in notes.go. Run it with go generate in package schema;
// a test there fails when the committed file is not what it writes.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
)

func main() {
	out, err := generate()
	if err == nil {
		err = os.WriteFile("floodgate.schema.json", out, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// generate returns the schema, formatted.
func generate() ([]byte, error) {
	g := &generator{defs: &object{}, made: map[string]bool{}, used: map[string]bool{}}
	root := &object{}
	root.set("$schema", "https://json-schema.org/draft/2020-12/schema")
	root.set("$id", "https://github.com/floodgate/floodgate/schema/floodgate.schema.json")
	root.set("title", "Floodgate policy file")
	g.leafDefs()
	root.merge(g.structSchema(reflect.TypeFor[config.File](), ""))
	root.set("$defs", g.defs)
	for key := range notes {
		if !g.used[key] {
			g.fail("note %q names no field", key)
		}
	}
	if g.err != nil {
		return nil, g.err
	}
	tidy(root)
	var p printer
	p.write(root, "", false)
	p.b.WriteByte('\n')
	return p.b.Bytes(), p.err
}

type generator struct {
	defs *object
	made map[string]bool // the $defs made
	used map[string]bool // the notes used
	err  error
}

func (g *generator) fail(format string, args ...any) {
	if g.err == nil {
		g.err = fmt.Errorf(format, args...)
	}
}

// note returns the note of key parsed, nil when there is none.
func (g *generator) note(key string) *object {
	src, ok := notes[key]
	if !ok {
		return nil
	}
	g.used[key] = true
	o, err := parseObject(src)
	if err != nil {
		g.fail("note %q: %v", key, err)
	}
	return o
}

// defNames are the structs written once in $defs and referred to. An
// account is its parameters.
var defNames = map[reflect.Type]string{
	reflect.TypeFor[config.Params]():  "params",
	reflect.TypeFor[config.Account](): "params",
	reflect.TypeFor[config.Match]():   "match",
	reflect.TypeFor[config.Route]():   "route",
	reflect.TypeFor[config.Stage]():   "stage",
	reflect.TypeFor[config.Plan]():    "plan",
	reflect.TypeFor[config.Key]():     "key",
	reflect.TypeFor[config.Limit]():   "limit",
}

// custom are the types with a YAML shape of their own (config decodes
// them with hooks): their field's note is their whole schema.
var custom = map[reflect.Type]bool{
	reflect.TypeFor[config.KeySpec](): true,
	reflect.TypeFor[config.Delay]():   true,
}

// leafDefs writes the $defs that no struct makes.
func (g *generator) leafDefs() {
	for _, d := range []struct {
		name string
		o    *object
	}{
		{"name", obj("type", "string", "pattern", "^[A-Za-z0-9_-]{1,64}$")},
		{"duration", obj("type", "string", "pattern", `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
			"description", "A Go duration: 500ms, 30s, 5m, 24h.")},
		{"failure", obj("type", "string", "enum", failurePolicies(), "default", floodgate.FailLocal.String(),
			"description", "What the limit does when the store cannot answer in time (default local).")},
		{"period", obj("type", "string", "pattern", "^(?i:"+strings.Join(periods(), "|")+")$",
			"description", "DAY, WEEK (ISO, from Monday) or MONTH.")},
		{"keyPart", obj("type", "string", "pattern",
			"^("+strings.Join(config.Choices("limits[].key"), "|")+"|"+config.KeyHeaderPrefix+"[!#$%&'*+.^_`|~0-9A-Za-z-]+)$")},
	} {
		g.defs.set(d.name, d.o)
		g.made[d.name] = true
	}
}

// goEnums are the enumerations of the fields whose values are package
// floodgate's, by note key.
func goEnums() map[string][]string {
	var algs, cons []string
	for _, a := range floodgate.Algorithms() {
		algs = append(algs, a.String())
	}
	for c := floodgate.Consistency(0); ; c++ {
		if p, err := floodgate.ParseConsistency(c.String()); err != nil || p != c {
			break
		}
		cons = append(cons, c.String())
	}
	return map[string][]string{"Params.algorithm": algs, "Params.consistency": cons, "Plan.consistency": cons}
}

func failurePolicies() []string {
	var out []string
	for p := floodgate.FailurePolicy(0); ; p++ {
		if q, err := floodgate.ParseFailurePolicy(p.String()); err != nil || q != p {
			return out
		}
		out = append(out, p.String())
	}
}

func periods() []string {
	var out []string
	for p := floodgate.Day; ; p++ {
		if q, err := floodgate.ParsePeriod(p.String()); err != nil || q != p {
			return out
		}
		out = append(out, p.String())
	}
}

// leasable names the algorithms that can be leased, for descriptions.
func leasable() string {
	var out []string
	for _, a := range floodgate.Algorithms() {
		if a.Traits().Leasable {
			out = append(out, a.String())
		}
	}
	return strings.Join(out, ", ")
}

var durationType = reflect.TypeFor[time.Duration]()

// typeSchema is the schema of a value of type t at path (a field path such
// as "limits[].scope", [] for any item of a list).
func (g *generator) typeSchema(t reflect.Type, path string) *object {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		return obj("$ref", "#/$defs/duration")
	}
	switch t.Kind() {
	case reflect.String:
		return obj("type", "string")
	case reflect.Bool:
		return obj("type", "boolean")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return obj("type", "integer")
	case reflect.Float64:
		return obj("type", "number")
	case reflect.Slice:
		return obj("type", "array", "items", g.typeSchema(t.Elem(), path+"[]"))
	case reflect.Struct:
		name, ok := defNames[t]
		if !ok {
			return g.structSchema(t, path)
		}
		if !g.made[name] {
			g.made[name] = true
			g.defs.set(name, nil) // its place, in the order of first use
			g.defs.set(name, g.structSchema(t, path))
		}
		return obj("$ref", "#/$defs/"+name)
	}
	g.fail("%s: no schema for a %s", path, t)
	return &object{}
}

// field is one key of a struct in the file, possibly of an inlined struct.
type field struct {
	name  string
	owner reflect.Type // the struct that declares it
	typ   reflect.Type
}

// fields lists the keys of a struct as package config's decoder reads
// them: exported fields with a yaml tag other than "-", inlined structs'
// fields in their place.
func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if !f.IsExported() || tag == "" || tag == "-" {
			continue
		}
		name, opt, _ := strings.Cut(tag, ",")
		if opt == "inline" {
			out = append(out, fields(f.Type)...)
			continue
		}
		out = append(out, field{name: name, owner: t, typ: f.Type})
	}
	return out
}

// structSchema is the schema of a struct: an object of its fields, and no
// other, with what the struct's note adds (required fields, oneOf).
func (g *generator) structSchema(t reflect.Type, path string) *object {
	o := obj("type", "object", "additionalProperties", false)
	props := &object{}
	for _, f := range fields(t) {
		props.set(f.name, g.fieldSchema(f, join(path, f.name)))
	}
	o.set("properties", props)
	if n := g.note(t.Name()); n != nil {
		o.merge(n)
	}
	return o
}

// fieldSchema is the schema of one field: its type's, the enumeration of
// its values, and its note.
func (g *generator) fieldSchema(f field, path string) *object {
	key := f.owner.Name() + "." + f.name
	var s *object
	if custom[f.typ] {
		s = &object{}
		if _, ok := notes[key]; !ok {
			g.fail("%s: a %s needs a note with its whole schema", key, f.typ)
		}
	} else {
		s = g.typeSchema(f.typ, path)
	}
	if words := goEnums()[key]; words != nil {
		s.set("enum", words)
	} else if words := config.Choices(path); words != nil && !custom[f.typ] {
		s.set("enum", words)
	}
	if items := g.note(key + "[]"); items != nil {
		it, _ := s.get("items").(*object)
		if it == nil {
			g.fail("%s[]: a note for the items of a field that is no list", key)
		} else {
			it.merge(items)
		}
	}
	if n := g.note(key); n != nil {
		if n.get("$ref") != nil {
			s.del("type")
		}
		s.merge(n)
	}
	return s
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// object is a JSON object that keeps its keys in order.
type object struct {
	keys []string
	vals map[string]any
}

// obj makes an object of key, value pairs.
func obj(kv ...any) *object {
	o := &object{}
	for i := 0; i+1 < len(kv); i += 2 {
		o.set(kv[i].(string), kv[i+1])
	}
	return o
}

func (o *object) set(k string, v any) {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *object) get(k string) any { return o.vals[k] }

func (o *object) del(k string) {
	if _, ok := o.vals[k]; ok {
		delete(o.vals, k)
		o.keys = slices.DeleteFunc(o.keys, func(s string) bool { return s == k })
	}
}

// merge sets every key of p in o, in p's order after o's.
func (o *object) merge(p *object) {
	for _, k := range p.keys {
		o.set(k, p.vals[k])
	}
}

// parseObject reads a JSON object keeping the order of its keys.
func parseObject(src string) (*object, error) {
	dec := json.NewDecoder(strings.NewReader(src))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*object)
	if !ok {
		return nil, fmt.Errorf("not an object")
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("text after the object")
	}
	return o, nil
}

func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			o.set(k.(string), v)
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		var l []any
		for dec.More() {
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		_, err := dec.Token()
		return l, err
	}
	return tok, nil
}

// keyOrder orders the keywords of a schema; others follow, as they came.
var keyOrder = []string{"$schema", "$id", "title", "$ref", "type", "enum", "pattern", "minimum", "maximum",
	"minLength", "minItems", "default", "additionalProperties", "description", "required", "items", "oneOf",
	"properties", "$defs"}

// tidy orders the keywords of the schema s and of those inside it.
func tidy(s *object) {
	rank := func(k string) int {
		if i := slices.Index(keyOrder, k); i >= 0 {
			return i
		}
		return len(keyOrder)
	}
	slices.SortStableFunc(s.keys, func(a, b string) int { return rank(a) - rank(b) })
	for _, k := range s.keys {
		switch v := s.vals[k].(type) {
		case *object:
			if k != "properties" && k != "$defs" {
				tidy(v)
				continue
			}
			for _, m := range v.keys {
				if ms, ok := v.vals[m].(*object); ok {
					tidy(ms)
				}
			}
		case []any:
			for _, e := range v {
				if es, ok := e.(*object); ok {
					tidy(es)
				}
			}
		}
	}
}

// printer formats the schema.
type printer struct {
	b   bytes.Buffer
	err error
}

// write writes v: the fields of an object ("properties", "$defs") and an
// object that holds some one key a line, every other value on one line.
func (p *printer) write(v any, indent string, members bool) {
	o, ok := v.(*object)
	if !ok || !members && !tall(o) {
		p.line(v)
		return
	}
	p.b.WriteString("{\n")
	for i, k := range o.keys {
		p.b.WriteString(indent + "  ")
		p.line(k)
		p.b.WriteString(": ")
		p.write(o.vals[k], indent+"  ", !members && (k == "properties" || k == "$defs"))
		if i < len(o.keys)-1 {
			p.b.WriteByte(',')
		}
		p.b.WriteByte('\n')
	}
	p.b.WriteString(indent + "}")
}

// tall reports whether an object or one inside it holds fields.
func tall(v any) bool {
	switch v := v.(type) {
	case *object:
		if v.get("properties") != nil || v.get("$defs") != nil {
			return true
		}
		for _, k := range v.keys {
			if tall(v.vals[k]) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, tall)
	}
	return false
}

// line writes v on one line.
func (p *printer) line(v any) {
	switch v := v.(type) {
	case *object:
		p.b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				p.b.WriteString(", ")
			}
			p.line(k)
			p.b.WriteString(": ")
			p.line(v.vals[k])
		}
		p.b.WriteByte('}')
	case []any:
		p.list(len(v), func(i int) any { return v[i] })
	case []string:
		p.list(len(v), func(i int) any { return v[i] })
	default:
		var s bytes.Buffer
		enc := json.NewEncoder(&s)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil && p.err == nil {
			p.err = err
		}
		p.b.Write(bytes.TrimSuffix(s.Bytes(), []byte("\n")))
	}
}

func (p *printer) list(n int, at func(int) any) {
	p.b.WriteByte('[')
	for i := range n {
		if i > 0 {
			p.b.WriteString(", ")
		}
		p.line(at(i))
	}
	p.b.WriteByte(']')
}
