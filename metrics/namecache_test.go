package metrics

import (
	"strconv"
	"strings"
	"testing"
)

// Names that share slots find their own series or none, never another's;
// a name equal to a cached one but built anew (another address) finds its
// series or misses.
func TestNameCacheFindsOwnSeries(t *testing.T) {
	var c nameCache[string]
	names := make([]string, 500)
	vals := make([]*string, len(names))
	for i := range names {
		names[i] = "limit-" + strconv.Itoa(i)
		v := names[i]
		vals[i] = &v
	}
	for round := range 2 {
		for i, n := range names {
			if got := c.get(n); got != nil && got != vals[i] {
				t.Fatalf("round %d: get(%q) = %q", round, n, *got)
			}
			c.put(n, vals[i])
			if got := c.get(n); got != vals[i] {
				t.Fatalf("round %d: get(%q) right after put = %v", round, n, got)
			}
			if got := c.get(strings.Clone(n)); got != nil && got != vals[i] {
				t.Fatalf("round %d: get of %q built anew = %q", round, n, *got)
			}
		}
	}
	if got := c.get("never-put"); got != nil {
		t.Fatalf("get of a name never put = %q", *got)
	}
}
