package rls

import (
	"testing"
)

// TestReplacedLimitStillReplaces: every limit named in the replaces of a
// limit that applies is dropped, whether or not that limit is itself
// replaced, as envoyproxy/ratelimit collects every replaces list of the
// request before dropping any limit. With a replacing b and b replacing
// c, only a applies; with x and y replacing each other, neither does. In
// both modes.
func TestReplacedLimitStillReplaces(t *testing.T) {
	const src = `domain: d
descriptors:
  - key: a
    rate_limit: {name: a, unit: hour, requests_per_unit: 5, replaces: [{name: b}]}
  - key: b
    rate_limit: {name: b, unit: hour, requests_per_unit: 5, replaces: [{name: c}]}
  - key: c
    rate_limit: {name: c, unit: hour, requests_per_unit: 0}
  - key: x
    rate_limit: {name: x, unit: hour, requests_per_unit: 0, replaces: [{name: y}]}
  - key: y
    rate_limit: {name: y, unit: hour, requests_per_unit: 0, replaces: [{name: x}]}
`
	for _, compat := range []bool{false, true} {
		cfg, err := ParseWith("test.yaml", []byte(src), LoadOptions{Compat: compat})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := startService(t, cfg, newClock(), Options{})
		r := ask(t, c, "d", desc("a", "1"), desc("b", "1"), desc("c", "1"))
		if r.OverallCode != ok || r.Statuses[1].CurrentLimit != nil || r.Statuses[2].CurrentLimit != nil {
			t.Errorf("compat %v: a replaces b, b replaces c: %v; want OK with a's limit alone", compat, r)
		}
		r = ask(t, c, "d", desc("x", "1"), desc("y", "1"))
		if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit != nil {
			t.Errorf("compat %v: x and y replace each other: %v; want OK with neither limit", compat, r)
		}
	}
}
