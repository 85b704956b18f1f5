package yamlfile

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

type inner struct {
	Count int64         `yaml:"count"`
	Wait  time.Duration `yaml:"wait"`
}

type doc struct {
	Name   string   `yaml:"name"`
	On     bool     `yaml:"on"`
	Tags   []string `yaml:"tags"`
	Inner  *inner   `yaml:"inner"`
	Parts  parts    `yaml:"parts"`
	Inline `yaml:",inline"`
}

type Inline struct {
	Extra string `yaml:"extra"`
}

// parts is a string or a list of strings, decoded by a hook.
type parts []string

var hooks = map[reflect.Type]Hook{
	reflect.TypeOf(parts{}): func(d *Decoder, n *yaml.Node, v reflect.Value, path string) {
		if n.Kind == yaml.ScalarNode {
			v.Set(reflect.ValueOf(parts{n.Value}))
			return
		}
		var s []string
		d.Decode(n, reflect.ValueOf(&s).Elem(), path)
		v.Set(reflect.ValueOf(parts(s)))
	},
}

func decode(t *testing.T, src string) (*doc, *Decoder, error) {
	t.Helper()
	root, errs := Read("f.yaml", []byte(src))
	if errs != nil {
		return nil, nil, errs
	}
	var x doc
	d := NewDecoder("f.yaml", hooks)
	d.Decode(root, reflect.ValueOf(&x).Elem(), "")
	return &x, d, d.Err()
}

func TestDecode(t *testing.T) {
	x, d, err := decode(t, "name: n\non: TRUE\ntags: [a, 1]\ninner: {count: 1_000, wait: 1m30s}\nparts: p\nextra: e\n")
	if err != nil {
		t.Fatal(err)
	}
	if x.Name != "n" || !x.On || strings.Join(x.Tags, ",") != "a,1" || x.Inner.Count != 1000 ||
		x.Inner.Wait != 90*time.Second || len(x.Parts) != 1 || x.Parts[0] != "p" || x.Extra != "e" {
		t.Errorf("decoded %+v %+v", x, x.Inner)
	}
	pos := d.Positions()
	if p := pos.Of("inner.wait"); p != (Pos{4, 29}) {
		t.Errorf("inner.wait at %v", p)
	}
	if p := pos.Of("inner.missing"); p != (Pos{4, 8}) {
		t.Errorf("unwritten field at %v, want its parent's", p)
	}
	if p := pos.Of("absent"); p != (Pos{1, 1}) {
		t.Errorf("unwritten top-level field at %v, want the document's", p)
	}
	if !d.Written("tags[1]") || d.Written("inner.missing") {
		t.Error("Written")
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	_, d, err := decode(t, `name: [x]
on: maybe
tags: a
inner: {count: 1.5, wait: soon, cuont: 2}
nmae: y
name: z
<<: {extra: e}
`)
	want := []string{
		`f.yaml:1:7: name: want a string, got a list`,
		`f.yaml:2:5: on: want true or false, got "maybe"`,
		`f.yaml:3:7: tags: want a list, got "a"`,
		`f.yaml:4:16: inner.count: want a whole number, got "1.5"`,
		`f.yaml:4:27: inner.wait: bad duration "soon": want a non-negative Go duration such as 500ms, 30s, 5m or 24h`,
		`f.yaml:4:33: inner.cuont: unknown field (did you mean "count"?)`,
		`f.yaml:5:1: nmae: unknown field (did you mean "name"?)`,
		`f.yaml:6:1: name: field given twice`,
		`f.yaml:7:1: merge keys (<<) are not supported; write the fields out`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("problems\n got:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	// Errorf adds one problem per field, at the field's position.
	d.Errorf("name", "not reported: name has a problem already")
	d.Errorf("inner.count2", "reported at inner")
	errs := d.Problems()
	if last := errs[len(errs)-1].Error(); last != "f.yaml:4:8: inner.count2: reported at inner" || len(errs) != len(want)+1 {
		t.Errorf("after Errorf: %v", errs)
	}
}

func TestReadRefuses(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"", "f.yaml: the file is empty"},
		{"# only a comment\n", "f.yaml: the file is empty"},
		{"~\n", "f.yaml: the file is empty"},
		{"a: 1\n---\nb: 2\n", "f.yaml:2:1: more than one YAML document; write one"},
		{"a: [1\nb: 2\n", "f.yaml:1:1: YAML syntax (in the block starting here): did not find expected ',' or ']'"},
		{strings.Repeat(" ", MaxFileSize+1), "f.yaml: file is larger than 16777216 bytes"},
	} {
		root, errs := Read("f.yaml", []byte(c.src))
		if root != nil || len(errs) != 1 || errs.Error() != c.want {
			t.Errorf("%.20q: %v, want %s", c.src, errs, c.want)
		}
	}
}

func TestAliasesAreBounded(t *testing.T) {
	// 1,000 lists of the same 1,000 strings: a million values.
	var b strings.Builder
	b.WriteString("tags: &t [")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("x")
	}
	b.WriteString("]\nextra: [")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("*t")
	}
	b.WriteString("]\n")
	type bomb struct {
		Tags  []string   `yaml:"tags"`
		Extra [][]string `yaml:"extra"`
	}
	root, errs := Read("bomb.yaml", []byte(b.String()))
	if errs != nil {
		t.Fatal(errs)
	}
	var x bomb
	d := NewDecoder("bomb.yaml", nil)
	d.Decode(root, reflect.ValueOf(&x).Elem(), "")
	if !d.TooLarge() || len(d.Problems()) != 1 || !strings.Contains(d.Err().Error(), "once its aliases are expanded") {
		t.Errorf("got %.300v", d.Err())
	}
}

func TestSortedDropsDuplicatesAndCaps(t *testing.T) {
	var es Errors
	for i := range MaxErrors + 10 {
		es = append(es, &Error{File: "b", Line: MaxErrors + 10 - i, Msg: "m"})
	}
	es = append(es, &Error{File: "a", Line: 3, Msg: "m"}, &Error{File: "a", Line: 3, Msg: "m"})
	got := es.Sorted()
	if len(got) != MaxErrors+1 || got[0].File != "a" || got[1].Line != 1 {
		t.Fatalf("sorted: %d items, first %v %v", len(got), got[0], got[1])
	}
	if last := got[len(got)-1].Error(); last != "b: and 11 more problems" {
		t.Errorf("last item %q", last)
	}
}

// TestLongValuesCutInProblems: a problem quoting a value of 100 KB (a
// count, a duration, a boolean, a hook's error) shows its first maxShown
// bytes and its length, never the whole value; a key of 100 KB named as the
// problem's field is cut too. Each still names the file, line and field.
func TestLongValuesCutInProblems(t *testing.T) {
	huge := strings.Repeat("é", 50_000) // 100 KB, cut at a character's start
	_, _, err := decode(t, "inner: {count: "+huge+", wait: "+huge+"}\non: "+huge+"\n? "+huge+"\n: 1\n")
	es, ok := err.(Errors)
	if !ok || len(es) != 4 {
		t.Fatalf("got %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
	for i, want := range []string{"f.yaml:1:16: inner.count: want a whole number, got \"éé", "f.yaml:1:", "f.yaml:2:5: on: want true or false", "f.yaml:3:3: éé"} {
		s := es[i].Error()
		if !strings.HasPrefix(s, want) || len(s) > maxMsg+64 || !utf8.ValidString(s) {
			t.Errorf("problem %d: %d bytes %.200q, want %q… cut", i, len(s), s, want)
		}
	}
	if s := err.Error(); !strings.Contains(s, "… (100000 bytes)") || len(s) > 8<<10 {
		t.Errorf("the problems: %d bytes %.300q", len(s), s)
	}
}
