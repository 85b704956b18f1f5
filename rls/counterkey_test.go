package rls

import "testing"

// TestDistinctDescriptorsNeverShareACounter: in Floodgate's mode each
// distinct descriptor counts on a counter of its own. The values of a
// descriptor's entries are whatever the caller sends (request headers
// through Envoy's request_headers action), so a value holding the text
// the counter's key puts between entries must not move the boundary
// between two entries: [tenant=acme|4:path=/x, path=/y] and
// [tenant=acme, path=/x|4:path=/y] are two descriptors, and spending the
// limit of one must leave the other's whole.
func TestDistinctDescriptorsNeverShareACounter(t *testing.T) {
	const nested = `
domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2}
`
	c, _ := startService(t, mustParse(t, nested), newClock(), Options{})
	first := desc("tenant", "acme|4:path=/x", "path", "/y")
	second := desc("tenant", "acme", "path", "/x|4:path=/y")
	for i := range 2 {
		if r := ask(t, c, "d", first); r.OverallCode != ok {
			t.Fatalf("request %d of the first descriptor: %v", i+1, r)
		}
	}
	r := ask(t, c, "d", second)
	if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("the second descriptor after the first spent its limit: %v, want OK with 1 left "+
			"(the two descriptors share a counter)", r)
	}
}
