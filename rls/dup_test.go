package rls

import (
	"strings"
	"testing"
)

// The same descriptor twice in one request counts twice, all or nothing.
func TestSameDescriptorTwiceCountsTwice(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	r := ask(t, c, "d", desc("user", "twice"), desc("user", "twice"))
	if r.OverallCode != ok {
		t.Fatalf("%v", r)
	}
	if r = ask(t, c, "d", desc("user", "twice")); r.Statuses[0].LimitRemaining != 7 {
		t.Fatalf("after a request with the descriptor twice and one with it once: %v, want 7 left", r)
	}
	// 7 left: a request carrying it 4 times at cost 2 (8 units) is denied
	// and takes nothing.
	if r = askN(t, c, "d", 2, desc("user", "twice"), desc("user", "twice"), desc("user", "twice"), desc("user", "twice")); r.OverallCode != over {
		t.Fatalf("8 units of 7: %v", r)
	}
	if r = ask(t, c, "d", desc("user", "twice")); r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("the denied request took something: %v", r)
	}
}

// TestCompatTakesAFieldGivenTwice: in compatibility mode a field given
// twice in one mapping is taken as envoyproxy/ratelimit (gopkg.in/yaml.v2)
// takes it: the later value is decoded over the earlier one, a mapping's
// fields merging; each is a warning. Floodgate's mode refuses it. The
// expected dump is envoyproxy/ratelimit's /rlconfig for the same file.
func TestCompatTakesAFieldGivenTwice(t *testing.T) {
	src := `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
    rate_limit: {requests_per_unit: 5}
  - key: j
    value: a
    value: b
    rate_limit: {unit: second, requests_per_unit: 2}
`
	cfg, err := ParseWith("a.yaml", []byte(src), LoadOptions{Compat: true})
	if err != nil {
		t.Fatal(err)
	}
	const peer = "d.k: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false\n" +
		"d.j_b: unit=SECOND requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
	if got := cfg.Dump(); got != peer {
		t.Errorf("dump:\n%s\nwant:\n%s", got, peer)
	}
	want := []string{
		"a.yaml:5:5: descriptors[0].rate_limit: given twice: the later value is decoded over the earlier one",
		"a.yaml:8:5: descriptors[1].value: given twice: the later value is decoded over the earlier one",
	}
	if w := cfg.Warnings(); len(w) != 2 || w[0] != want[0] || w[1] != want[1] {
		t.Errorf("warnings %q, want %q", w, want)
	}
	if _, err := ParseWith("a.yaml", []byte(src), LoadOptions{}); err == nil || !strings.Contains(err.Error(), "a.yaml:5:5: descriptors[0].rate_limit: field given twice") {
		t.Errorf("Floodgate's mode: %v", err)
	}
}
