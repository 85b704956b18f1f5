package schema

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/testcerts"
)

// defaultsFiles write every section whose fields have defaults, leaving
// those fields out, so that the parsed files hold the Go defaults; the
// second has the quotas the first cannot (one account limit).
var defaultsFiles = []string{`
server:
  unknown_key_limit: {rate: 20}
  user:
    jwt: {alg: HS256, key_file: demo-jwt-secret.txt}
routes:
  - {name: r, upstream: none, overload: {adaptive: {}, queue: {max_wait: 1s}}}
  - {name: pool, upstreams: ["http://10.0.0.1", "http://10.0.0.2"]}
stages:
  - {name: s, rate: 5}
plans:
  - {name: p, rate: 5, quota: {limit: 5, period: DAY}}
limits:
  - {name: rate, rate: 5}
  - {name: quota, algorithm: quota, limit: 5, period: DAY}
  - {name: tokens, rate: 5, actual: {body: usage.total_tokens}}
account: {rate: 5}
`, `
server:
  unknown_key_limit: {algorithm: quota, limit: 5, period: DAY}
stages:
  - {name: q, algorithm: quota, limit: 5, period: DAY}
account: {algorithm: quota, limit: 5, period: DAY}
`}

// schemaDefaults collects every "default" of the schema by field path
// ("server.listen", "limits[].per"), following $ref.
func schemaDefaults(t *testing.T) map[string]any {
	t.Helper()
	root := loadSchema(t)
	v := &validator{root: root}
	out := map[string]any{}
	var walk func(s map[string]any, path string, depth int)
	walk = func(s map[string]any, path string, depth int) {
		if depth > 12 {
			return
		}
		// A default may sit next to a $ref or in the definition it names.
		if d, ok := s["default"]; ok && path != "" {
			out[path] = d
		}
		s = v.resolve(s)
		if d, ok := s["default"]; ok && path != "" {
			if _, set := out[path]; !set {
				out[path] = d
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(items, path+"[]", depth+1)
		}
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			walk(p.(map[string]any), strings.TrimPrefix(path+"."+name, "."), depth+1)
		}
	}
	walk(root, "", 0)
	return out
}

// goValues returns the values at path in the parsed file: a list item
// stands for every item, and a value left zero is left out (a parameter
// that does not apply to an item's algorithm).
func goValues(v reflect.Value, path []string) []reflect.Value {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if len(path) == 0 {
		if v.IsZero() && v.Kind() != reflect.Bool {
			return nil
		}
		return []reflect.Value{v}
	}
	name, list := strings.CutSuffix(path[0], "[]")
	f, ok := fieldByTag(v, name)
	if !ok {
		return nil
	}
	if !list {
		return goValues(f, path[1:])
	}
	var out []reflect.Value
	for i := 0; i < f.Len(); i++ {
		out = append(out, goValues(f.Index(i), path[1:])...)
	}
	return out
}

// fieldByTag finds the field of struct v with the yaml name, looking
// into inlined structs.
func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, opt, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if opt == "inline" {
			if f, ok := fieldByTag(v.Field(i), name); ok {
				return f, true
			}
			continue
		}
		if tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// sameValue compares a schema default (JSON) with a Go value.
func sameValue(def any, v reflect.Value) bool {
	switch x := v.Interface().(type) {
	case time.Duration:
		s, _ := def.(string)
		d, err := time.ParseDuration(s)
		return err == nil && d == x
	case config.KeySpec:
		return len(x.Parts) == 1 && x.Parts[0] == def
	case bool:
		return def == x
	case string:
		return def == x
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int64:
		f, ok := def.(float64)
		return ok && f == float64(v.Int())
	case reflect.Float64:
		f, ok := def.(float64)
		return ok && f == v.Float()
	}
	return false
}

// TestSchemaDefaultsAreGoDefaults reads every "default" of the schema and
// checks that a file leaving the field out gets exactly that value from
// package config (which takes it from the package that implements it:
// floodgate, identity).
func TestSchemaDefaultsAreGoDefaults(t *testing.T) {
	var files []*config.File
	for _, src := range defaultsFiles {
		f, err := config.Parse("../examples/defaults.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// The gateway's TLS, with a certificate that exists.
	ca, err := testcerts.NewCA(t.TempDir(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Server("gw")
	if err != nil {
		t.Fatal(err)
	}
	f, err := config.Parse("../examples/defaults.yaml", []byte(fmt.Sprintf("server:\n  tls: {certs: [{cert: %s, key: %s}]}\n", pair.Cert, pair.Key)))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, f)
	defs := schemaDefaults(t)
	var paths []string
	for p := range defs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		var vals []reflect.Value
		for _, f := range files {
			vals = append(vals, goValues(reflect.ValueOf(f).Elem(), strings.Split(p, "."))...)
		}
		if len(vals) == 0 {
			t.Errorf("%s: schema default %v, but the test file gives no Go value", p, defs[p])
			continue
		}
		for _, v := range vals {
			if !sameValue(defs[p], v) {
				t.Errorf("%s: schema default %v, Go default %v", p, defs[p], v.Interface())
				break
			}
		}
	}
	// The ones the task of keeping them equal started with are there.
	for _, p := range []string{"server.listen", "server.admin_listen", "server.store", "server.store_timeout",
		"server.ipv6_prefix", "server.api_key_header", "server.user.jwt.leeway", "server.upstream.timeout",
		"server.upstream.dial_timeout", "server.upstream.idle_timeout", "server.headers.ratelimit"} {
		if _, ok := defs[p]; !ok {
			t.Errorf("%s has no default in the schema", p)
		}
	}
}

// TestSchemaDescriptionsAgreeWithDefaults: a description that says
// "(default X)" has a "default" keyword, and it is X.
func TestSchemaDescriptionsAgreeWithDefaults(t *testing.T) {
	said := regexp.MustCompile(`\(default ([^;)]+)[;)]`)
	var walk func(x any, path string)
	walk = func(x any, path string) {
		switch x := x.(type) {
		case map[string]any:
			if d, ok := x["description"].(string); ok {
				if m := said.FindStringSubmatch(d); m != nil && !strings.HasPrefix(m[1], ": ") {
					def, ok := x["default"]
					if !ok {
						t.Errorf("%s: description says default %s, no default keyword", path, m[1])
					} else if fmt.Sprint(def) != m[1] {
						t.Errorf("%s: description says default %s, keyword says %v", path, m[1], def)
					}
				}
			}
			for k, v := range x {
				walk(v, path+"/"+k)
			}
		case []any:
			for i, v := range x {
				walk(v, fmt.Sprintf("%s/%d", path, i))
			}
		}
	}
	walk(loadSchema(t), "#")
}
