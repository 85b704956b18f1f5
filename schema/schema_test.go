package schema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
)

// validator checks a document decoded from YAML against the subset of JSON
// Schema the file uses: $ref, type, properties, additionalProperties,
// required, items, enum, minimum, maximum, minItems, pattern and oneOf.
type validator struct {
	root map[string]any
	errs []string
}

func (v *validator) resolve(s map[string]any) map[string]any {
	for depth := 0; depth < 16; depth++ {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		var node any = v.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			node = node.(map[string]any)[part]
		}
		next, ok := node.(map[string]any)
		if !ok {
			v.errs = append(v.errs, "bad $ref "+ref)
			return map[string]any{}
		}
		// Keywords next to a $ref (a description) add nothing to check.
		s = next
	}
	return s
}

func typeOf(x any) string {
	switch x.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string, time.Time:
		return "string"
	case int, int64, uint64:
		return "integer"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", x)
}

func (v *validator) check(s map[string]any, x any, path string) {
	s = v.resolve(s)
	if alts, ok := s["oneOf"].([]any); ok {
		n := 0
		for _, a := range alts {
			sub := &validator{root: v.root}
			sub.check(a.(map[string]any), x, path)
			if len(sub.errs) == 0 {
				n++
			}
		}
		if n != 1 {
			v.errs = append(v.errs, fmt.Sprintf("%s: matches %d alternatives of oneOf, want 1", path, n))
		}
	}
	if t, ok := s["type"].(string); ok && typeOf(x) != t && !(t == "number" && typeOf(x) == "integer") {
		v.errs = append(v.errs, fmt.Sprintf("%s: %s, want %s", path, typeOf(x), t))
		return
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if fmt.Sprint(e) == fmt.Sprint(x) {
				found = true
			}
		}
		if !found {
			v.errs = append(v.errs, fmt.Sprintf("%s: %v not in %v", path, x, enum))
		}
	}
	if p, ok := s["pattern"].(string); ok {
		if str, ok := x.(string); ok && !regexp.MustCompile(p).MatchString(str) {
			v.errs = append(v.errs, fmt.Sprintf("%s: %q does not match %s", path, str, p))
		}
	}
	if n, ok := x.(int); ok {
		if m, ok := s["minimum"].(float64); ok && float64(n) < m {
			v.errs = append(v.errs, fmt.Sprintf("%s: %d below %v", path, n, m))
		}
		if m, ok := s["maximum"].(float64); ok && float64(n) > m {
			v.errs = append(v.errs, fmt.Sprintf("%s: %d above %v", path, n, m))
		}
	}
	switch x := x.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for _, r := range asStrings(s["required"]) {
			if _, ok := x[r]; !ok {
				v.errs = append(v.errs, fmt.Sprintf("%s: %s is required", path, r))
			}
		}
		for k, val := range x {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if s["additionalProperties"] == false {
					v.errs = append(v.errs, fmt.Sprintf("%s.%s: unknown field", path, k))
				}
				continue
			}
			v.check(ps, val, path+"."+k)
		}
	case []any:
		if m, ok := s["minItems"].(float64); ok && float64(len(x)) < m {
			v.errs = append(v.errs, fmt.Sprintf("%s: fewer than %v items", path, m))
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				v.check(items, e, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
}

func asStrings(x any) []string {
	l, _ := x.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		out = append(out, e.(string))
	}
	return out
}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(JSON, &root); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	return root
}

func validate(t *testing.T, root map[string]any, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	v := &validator{root: root}
	v.check(root, doc, "$")
	return v.errs
}

func TestExamplesValidate(t *testing.T) {
	root := loadSchema(t)
	files, _ := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for _, f := range files {
		if errs := validate(t, root, f); len(errs) > 0 {
			t.Errorf("%s does not match the schema:\n%s", f, strings.Join(errs, "\n"))
		}
		if _, err := config.Load(f); err != nil {
			t.Errorf("%s is not a valid policy file: %v", f, err)
		}
	}
}

func TestSchemaRejects(t *testing.T) {
	root := loadSchema(t)
	for file, want := range map[string]string{
		"unknown_field.yaml":   "limits[0].brust: unknown field",
		"bad_algorithm.yaml":   "not in",
		"bad_period.yaml":      "does not match",
		"bad_key.yaml":         "oneOf",
		"wrong_type.yaml":      "string, want integer",
		"bad_count_on.yaml":    "above 599",
		"bad_sha256.yaml":      "does not match",
		"missing_jwt_key.yaml": "HS512 not in",
	} {
		errs := validate(t, root, filepath.Join("..", "config", "testdata", "invalid", file))
		if !strings.Contains(strings.Join(errs, "\n"), want) {
			t.Errorf("%s: schema problems %q, want one containing %q", file, errs, want)
		}
	}
}

// TestSchemaCoversConfig walks the Go types of the file and the schema
// together: every field the decoder knows is in the schema and the reverse.
func TestSchemaCoversConfig(t *testing.T) {
	root := loadSchema(t)
	v := &validator{root: root}
	var walk func(s map[string]any, typ reflect.Type, path string)
	walk = func(s map[string]any, typ reflect.Type, path string) {
		s = v.resolve(s)
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			if typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct {
				items, ok := s["items"].(map[string]any)
				if !ok {
					t.Errorf("%s: schema has no items", path)
					return
				}
				s = v.resolve(items)
			}
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ == reflect.TypeOf(config.KeySpec{}) || typ == reflect.TypeOf(config.Delay{}) {
			return
		}
		props, _ := s["properties"].(map[string]any)
		fields := map[string]reflect.StructField{}
		var collect func(typ reflect.Type)
		collect = func(typ reflect.Type) {
			for i := 0; i < typ.NumField(); i++ {
				f := typ.Field(i)
				tag := f.Tag.Get("yaml")
				if tag == "" || tag == "-" {
					continue
				}
				name, opt, _ := strings.Cut(tag, ",")
				if opt == "inline" {
					collect(f.Type)
					continue
				}
				fields[name] = f
			}
		}
		collect(typ)
		var names []string
		for n := range fields {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			ps, ok := props[n].(map[string]any)
			if !ok {
				t.Errorf("%s.%s: in the Go types, not in the schema", path, n)
				continue
			}
			walk(ps, fields[n].Type, path+"."+n)
		}
		for n := range props {
			if _, ok := fields[n]; !ok {
				t.Errorf("%s.%s: in the schema, not in the Go types", path, n)
			}
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s: schema allows unknown fields", path)
		}
	}
	walk(root, reflect.TypeOf(config.File{}), "$")
}

// schemaNodes returns the schema of every field by path ("limits[].scope",
// [] for the items of a list), $refs followed.
func schemaNodes(t *testing.T) map[string]map[string]any {
	t.Helper()
	v := &validator{root: loadSchema(t)}
	out := map[string]map[string]any{}
	var walk func(s map[string]any, path string, depth int)
	walk = func(s map[string]any, path string, depth int) {
		if depth > 12 {
			return
		}
		s = v.resolve(s)
		out[path] = s
		if items, ok := s["items"].(map[string]any); ok {
			walk(items, path+"[]", depth+1)
		}
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			walk(p.(map[string]any), strings.TrimPrefix(path+"."+name, "."), depth+1)
		}
	}
	walk(v.root, "", 0)
	return out
}

// alternatives returns the words of a pattern ^(?i:a|b)$ or ^(a|b|...)$,
// up to the first that is not a plain word.
func alternatives(pattern string) []string {
	p := strings.TrimSuffix(strings.TrimPrefix(pattern, "^("), ")$")
	p = strings.TrimPrefix(p, "?i:")
	var out []string
	for _, w := range strings.Split(p, "|") {
		if !regexp.MustCompile(`^[a-z_]+$`).MatchString(w) {
			break
		}
		out = append(out, w)
	}
	return out
}

// goNames lists the names of the values of an enumeration from first on,
// up to the first whose name does not parse back to it.
func goNames[T interface {
	~uint8
	String() string
}](first T, parse func(string) (T, error)) []string {
	var out []string
	for v := first; ; v++ {
		if p, err := parse(v.String()); err != nil || p != v {
			return out
		}
		out = append(out, v.String())
	}
}

// TestSchemaEnumsAreGoValues ties every enumeration of the schema to the
// Go values it stands for: the algorithms, failure policies, consistencies
// and periods of package floodgate, and the words of config.Choices.
func TestSchemaEnumsAreGoValues(t *testing.T) {
	nodes := schemaNodes(t)
	enum := func(path string) []string {
		n, ok := nodes[path]
		if !ok {
			t.Errorf("%s: not in the schema", path)
			return nil
		}
		return asStrings(n["enum"])
	}
	var algs []string
	for _, a := range floodgate.Algorithms() {
		algs = append(algs, a.String())
	}
	failures := goNames(floodgate.FailurePolicy(0), floodgate.ParseFailurePolicy)
	cons := goNames(floodgate.Consistency(0), floodgate.ParseConsistency)
	periods := goNames(floodgate.Day, floodgate.ParsePeriod)
	same := func(what string, got, want []string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: the schema says %q, Go %q", what, got, want)
		}
	}
	sorted := func(s []string) []string { s = slices.Clone(s); sort.Strings(s); return s }
	for _, at := range []string{"limits[]", "stages[]", "account", "server.unknown_key_limit"} {
		same(at+".algorithm", enum(at+".algorithm"), algs)
		same(at+".on_failure", sorted(enum(at+".on_failure")), sorted(failures))
		same(at+".consistency", enum(at+".consistency"), cons)
		same(at+".period", alternatives(nodes[at+".period"]["pattern"].(string)), periods)
	}
	same("plans[].on_failure", sorted(enum("plans[].on_failure")), sorted(failures))
	same("plans[].consistency", enum("plans[].consistency"), cons)
	same("plans[].quota.period", alternatives(nodes["plans[].quota.period"]["pattern"].(string)), periods)
	for _, p := range config.ChoicePaths() {
		if p == "limits[].key" {
			part := loadSchema(t)["$defs"].(map[string]any)["keyPart"].(map[string]any)
			same(p, alternatives(part["pattern"].(string)), config.Choices(p))
			continue
		}
		same(p, enum(p), config.Choices(p))
	}
}
