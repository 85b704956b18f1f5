package sfv

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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
	f.Add(`"a";k0;k1;k2;k3;k4;k5;k6;k7;k8;k0=1;k8=2`)
	f.Fuzz(func(t *testing.T, field string) {
		items, _ := ParseList(field)
		if len(items) > MaxMembers {
			t.Fatalf("%d members", len(items))
		}
		for _, it := range items {
			seen := map[string]bool{}
			for _, p := range it.Params {
				if seen[p.Key] {
					t.Fatalf("parameter %q twice in %q", p.Key, field)
				}
				seen[p.Key] = true
			}
		}
	})
}

// params returns n parameters ";k<i>=<i>" with distinct keys.
func params(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, ";k%d=%d", i, i)
	}
	return b.String()
}

func TestParseListDuplicateParameterKeepsFirstPositionLastValue(t *testing.T) {
	// Few parameters: found by a scan.
	got, err := ParseList(`"a";q=1;w=2;q=3`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Item{{Value: "a", Params: []Param{{"q", int64(3)}, {"w", int64(2)}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	// Many parameters: a key repeated before and after the item's keys are
	// indexed, once and twice, keeps its first position and its last value.
	field := `"a"` + params(2*paramIndexAt) + `;k0=?0;k1;k` + strconv.Itoa(2*paramIndexAt-1) + `=-7;k0="last";z=1`
	got, err = ParseList(field)
	if err != nil {
		t.Fatal(err)
	}
	var wantParams []Param
	for i := range 2 * paramIndexAt {
		wantParams = append(wantParams, Param{"k" + strconv.Itoa(i), int64(i)})
	}
	wantParams[0].Value = "last"
	wantParams[1].Value = true
	wantParams[2*paramIndexAt-1].Value = int64(-7)
	wantParams = append(wantParams, Param{"z", int64(1)})
	want = []Item{{Value: "a", Params: wantParams}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	if v, ok := got[0].Int("z"); !ok || v != 1 {
		t.Errorf("Int(z) = %d, %v", v, ok)
	}
	// Each item has its own parameters.
	got, err = ParseList(`"a";q=1, "b";q=2` + params(paramIndexAt) + `;q=4`)
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := got[0].Int("q"); q != 1 {
		t.Errorf("first item q = %d, want 1", q)
	}
	if q, _ := got[1].Int("q"); q != 4 || got[1].Params[0].Key != "q" || len(got[1].Params) != paramIndexAt+1 {
		t.Errorf("second item: %#v", got[1].Params)
	}
}

func TestParseListRefusesMoreMembersOrParametersThanItsLimits(t *testing.T) {
	if items, err := ParseList(`"a"` + params(MaxParams)); err != nil || len(items[0].Params) != MaxParams {
		t.Fatalf("%d parameters: %v", MaxParams, err)
	}
	if _, err := ParseList(`"a"` + params(MaxParams+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d parameters: err = %v, want ErrTooLarge", MaxParams+1, err)
	}
	// Repeating one key counts too: the work is in the occurrences.
	if _, err := ParseList(`"a"` + strings.Repeat(";q=1", MaxParams+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d repeated parameters: err = %v, want ErrTooLarge", MaxParams+1, err)
	}
	members := strings.TrimSuffix(strings.Repeat(`"m";r=1, `, MaxMembers), ", ")
	if items, err := ParseList(members); err != nil || len(items) != MaxMembers {
		t.Fatalf("%d members: %d, %v", MaxMembers, len(items), err)
	}
	if _, err := ParseList(members + `, "m"`); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d members: err = %v, want ErrTooLarge", MaxMembers+1, err)
	}
	// A field of 2 MiB holding one item of distinct parameters is refused
	// as soon as the item passes the limit.
	var b strings.Builder
	b.WriteString(`"a"`)
	for i := 0; b.Len() < 2<<20; i++ {
		fmt.Fprintf(&b, ";k%x", i)
	}
	if _, err := ParseList(b.String()); !errors.Is(err, ErrTooLarge) {
		t.Errorf("2 MiB of parameters: err = %v, want ErrTooLarge", err)
	}
}

// TestParseListWorkIsLinear holds the search for duplicate parameters to a
// bounded number of steps per parameter, counted by the parser, however
// many parameters an item has.
func TestParseListWorkIsLinear(t *testing.T) {
	steps := func(field string) int {
		t.Helper()
		p := sfParser{s: field}
		if _, err := p.list(); err != nil {
			t.Fatal(err)
		}
		return p.steps
	}
	const perParam = paramIndexAt + 2
	for _, n := range []int{1, paramIndexAt, paramIndexAt + 1, MaxParams / 2, MaxParams} {
		// Distinct keys, then the same keys again (all duplicates).
		for _, field := range []string{`"a"` + params(n), `"a"` + params(n/2) + params(n-n/2)} {
			if s := steps(field); s > perParam*n {
				t.Errorf("%d parameters took %d steps, want at most %d", n, s, perParam*n)
			}
		}
	}
	// The largest field accepted: every member with every parameter.
	item := `"a"` + params(MaxParams)
	field := strings.TrimSuffix(strings.Repeat(item+", ", MaxMembers), ", ")
	if s, n := steps(field), MaxMembers*MaxParams; s > perParam*n {
		t.Errorf("%d parameters in %d members took %d steps, want at most %d", n, MaxMembers, s, perParam*n)
	}
}
