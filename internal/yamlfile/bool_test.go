package yamlfile

import (
	"reflect"
	"strings"
	"testing"
)

// TestBoolSpellings: a boolean field takes YAML's booleans and nothing
// else. Without YAML11Bools those of YAML 1.2's core schema (true, True,
// TRUE and the falses); with it, also YAML 1.1's (yes, on, y, no, off,
// n), exactly as gopkg.in/yaml.v2 decodes a Go bool. A quoted boolean is a
// string, 1 a number, t and tRuE strings, refused at the field's position.
func TestBoolSpellings(t *testing.T) {
	t.Parallel()
	type want struct {
		core, yaml11 string // "true", "false" or the problem
	}
	const refused = `want true or false`
	cases := map[string]want{
		"true": {"true", "true"}, "True": {"true", "true"}, "TRUE": {"true", "true"},
		"false": {"false", "false"}, "False": {"false", "false"}, "FALSE": {"false", "false"},
		"!!bool true": {"true", "true"}, `!!bool "false"`: {"false", "false"},
		"yes": {`want true or false, got "yes"`, "true"}, "Yes": {refused, "true"}, "YES": {refused, "true"},
		"y": {refused, "true"}, "Y": {refused, "true"}, "on": {refused, "true"}, "On": {refused, "true"}, "ON": {refused, "true"},
		"no": {refused, "false"}, "No": {refused, "false"}, "NO": {refused, "false"}, "n": {refused, "false"},
		"N": {refused, "false"}, "off": {refused, "false"}, "Off": {refused, "false"}, "OFF": {refused, "false"},
		"!!bool yes": {refused, "true"},
		"1":          {`want true or false, got "1"`, `want true or false (or yes, no, on, off, y, n), got "1"`},
		"0":          {refused, refused}, "t": {refused, refused}, "f": {refused, refused}, "T": {refused, refused},
		"tRuE": {refused, refused}, "yEs": {refused, refused}, "1.0": {refused, refused}, "!!bool 1": {refused, refused},
		"!!str true": {refused, refused}, "!!str yes": {refused, refused},
		`"true"`: {`want true or false, got the quoted string "true": a boolean is written without quotes`,
			`want true or false (or yes, no, on, off, y, n), got the quoted string "true": a boolean is written without quotes`},
		`'false'`: {`got the quoted string "false": a boolean is written without quotes`, refused},
		`"yes"`:   {`want true or false, got "yes"`, `got the quoted string "yes": a boolean is written without quotes`},
		"[true]":  {`want true or false, got a list`, `want true or false (or yes, no, on, off, y, n), got a list`},
	}
	for src, w := range cases {
		for _, yaml11 := range []bool{false, true} {
			root, errs := Read("f.yaml", []byte("name: n\non: "+src+"\n"))
			if errs != nil {
				t.Fatalf("%s: %v", src, errs)
			}
			expect := w.core
			if yaml11 {
				expect = w.yaml11
			}
			// The field starts as the opposite of what it should read.
			x := doc{On: expect != "true"}
			start := x.On
			d := NewDecoder("f.yaml", hooks)
			d.YAML11Bools = yaml11
			d.Decode(root, reflect.ValueOf(&x).Elem(), "")
			err := d.Err()
			switch expect {
			case "true", "false":
				if err != nil || x.On != (expect == "true") || x.On == start {
					t.Errorf("yaml11=%v on: %s: got %v, %v; want %s", yaml11, src, x.On, err, expect)
				}
			default:
				if err == nil {
					t.Errorf("yaml11=%v on: %s: read as %v, want refused (%s)", yaml11, src, x.On, expect)
					continue
				}
				// The problem names file, line, column and field.
				if got := err.Error(); !strings.HasPrefix(got, "f.yaml:2:5: on: ") || !strings.Contains(got, expect) {
					t.Errorf("yaml11=%v on: %s: %q, want f.yaml:2:5: on: ...%s", yaml11, src, got, expect)
				}
			}
		}
	}
}
