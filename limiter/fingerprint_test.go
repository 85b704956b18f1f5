package limiter

import (
	"reflect"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// TestRuleIDCoversEveryField changes each field of floodgate.Limit but
// Name, one at a time, and wants a different rule ID each time: a field
// left out of the fingerprint would let a changed limit keep its old
// counters.
func TestRuleIDCoversEveryField(t *testing.T) {
	if limitPrint.err != nil {
		t.Fatal(limitPrint.err)
	}
	base := floodgate.Limit{Name: "l", Algorithm: floodgate.TokenBucket, Rate: 5, Per: time.Second, Burst: 5}
	baseID, err := ruleID(&base)
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[floodgate.Limit]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "Name" {
			continue
		}
		for _, step := range []int64{1, 2} {
			l := base
			if !bump(reflect.ValueOf(&l).Elem().Field(i), step) {
				t.Fatalf("Limit.%s: the test cannot change a %s; teach bump", f.Name, f.Type)
			}
			id, err := ruleID(&l)
			if err != nil {
				t.Fatal(err)
			}
			if id == baseID {
				t.Errorf("Limit.%s changed by %d, and the rule ID %s did not", f.Name, step, id)
			}
		}
	}
}

// bump changes v, a settable field, by step (a zone or a day step apart);
// false for a type it does not know.
func bump(v reflect.Value, step int64) bool {
	switch v.Type() {
	case locationType:
		v.Set(reflect.ValueOf(time.FixedZone("test", int(step)*3600)))
		return true
	case timeType:
		v.Set(reflect.ValueOf(time.Unix(step*86400, 0)))
		return true
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + step)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + uint64(step))
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	default:
		return false
	}
	return true
}

// TestRuleIDNewFieldKeepsIDs plays a field added to a limit type: the
// fingerprints of the values that leave it zero stay what they were, and
// those that set it differ.
func TestRuleIDNewFieldKeepsIDs(t *testing.T) {
	type v1 struct {
		Name  string
		Rate  int64
		Per   time.Duration
		Start time.Time
	}
	type v2 struct {
		Name     string
		Rate     int64
		Jitter   time.Duration
		Per      time.Duration
		Start    time.Time
		Label    string
		Location *time.Location
	}
	always := []string{"Rate", "Per", "Start"}
	p1, p2 := newFingerprint(reflect.TypeFor[v1](), always), newFingerprint(reflect.TypeFor[v2](), always)
	if p1.err != nil || p2.err != nil {
		t.Fatal(p1.err, p2.err)
	}
	print1 := func(v v1) string { return string(p1.append(nil, reflect.ValueOf(v))) }
	print2 := func(v v2) string { return string(p2.append(nil, reflect.ValueOf(v))) }
	at := time.Unix(100, 0)
	old := print1(v1{Name: "a", Rate: 5, Per: time.Second, Start: at})
	if want := "5|1000000000|100000000000"; old != want {
		t.Errorf("v1 fingerprint %q, want %q", old, want)
	}
	if got := print2(v2{Name: "b", Rate: 5, Per: time.Second, Start: at}); got != old {
		t.Errorf("v2 without the new fields: %q, want v1's %q", got, old)
	}
	for _, v := range []v2{
		{Rate: 5, Per: time.Second, Start: at, Jitter: time.Millisecond},
		{Rate: 5, Per: time.Second, Start: at, Label: "x"},
		{Rate: 5, Per: time.Second, Start: at, Location: time.UTC},
	} {
		if got := print2(v); got == old {
			t.Errorf("%+v: fingerprint %q, the same as without the new field", v, got)
		}
	}
	if got, want := print2(v2{Rate: 5, Per: time.Second, Start: at, Label: "a|b"}), old+`|Label="a|b"`; got != want {
		t.Errorf("new string field: %q, want %q", got, want)
	}
	for _, bad := range []reflect.Type{
		reflect.TypeFor[struct{ Rate, Tags []string }](),
		reflect.TypeFor[struct{ Per int64 }](),
		reflect.TypeFor[struct {
			Rate  int64
			start time.Time
		}](),
	} {
		if p := newFingerprint(bad, []string{"Rate"}); p.err == nil {
			t.Errorf("%s: fingerprint made", bad)
		}
	}
}

func BenchmarkRuleID(b *testing.B) {
	l := floodgate.Limit{Name: "q", Algorithm: floodgate.Quota, Max: 100, Period: floodgate.Month, Location: time.UTC,
		AnchorDay: 15, Offset: 40, Start: time.Unix(1e9, 0)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ruleID(&l); err != nil {
			b.Fatal(err)
		}
	}
}
