package sfv

import (
	"reflect"
	"testing"
)

func TestParseList(t *testing.T) {
	got, err := ParseList(`"burst";q=100;w=60, "daily";q=5000;w=86400;pk=:YWNtZS0xMjM=:`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Item{
		{Value: "burst", Params: []Param{{"q", int64(100)}, {"w", int64(60)}}},
		{Value: "daily", Params: []Param{{"q", int64(5000)}, {"w", int64(86400)}, {"pk", []byte("acme-123")}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	got, err = ParseList(`tok;a;b=?0;c=-1.5;d="x\"y" ,	"z"`)
	if err != nil {
		t.Fatal(err)
	}
	want = []Item{
		{Value: Token("tok"), Params: []Param{{"a", true}, {"b", false}, {"c", -1.5}, {"d", `x"y`}}},
		{Value: "z"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	if items, err := ParseList("   "); err != nil || items != nil {
		t.Errorf("empty: %v %v", items, err)
	}
	for _, bad := range []string{
		`"a",`, `"a";Q=1`, `"a";q=1234567890123456`, `"unterminated`, `("inner")`, `"a" "b"`,
		`:bad!:`, `"a";q=1.2345`, `?2`, `"\x"`, `1.`, "\"tab\there\"", `-`, `,`,
	} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) accepted", bad)
		}
	}
}

func FuzzParseList(f *testing.F) {
	f.Add(`"burst";q=100;w=60, "daily";q=5000;w=86400;pk=:YWNtZS0xMjM=:`)
	f.Add(`"a";r=0;t=17`)
	f.Add(`tok;a;b=?0;c=-1.5`)
	f.Fuzz(func(t *testing.T, field string) {
		_, _ = ParseList(field)
	})
}
