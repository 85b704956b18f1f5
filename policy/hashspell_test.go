package policy

import (
	"net/http"
	"strings"
	"testing"
)

// TestHashedHeaderValuesCannotBeSpelled: a header value too long to keep
// is counted by its hash, and a short value spelled as that counter key's
// part ("sha256:" and the hex of the long value's hash) was counted on
// the same counter: a client could spend the counter of another whose
// value it knew (a long tenant name, a long session) and have it refused.
// The hashed form now starts with a '%' that no value counted as it is
// can hold unescaped.
func TestHashedHeaderValuesCannotBeSpelled(t *testing.T) {
	t.Parallel()
	p := compile(t, `
routes:
  - {name: r, match: {paths: ["/r"]}, upstream: none}
limits:
  - {name: by-tenant, rate: 1, per: 1h, burst: 1, key: "header:X-Tenant"}
`)
	keyOf := func(v string) string {
		var m Match
		h := http.Header{}
		h.Set("X-Tenant", v)
		p.Match(&Request{Method: "GET", Path: "/r", ClientIP: ip("198.51.100.7"), Header: h}, &m)
		if len(m.Hits) != 1 {
			t.Fatalf("%d hits for X-Tenant %q", len(m.Hits), v)
		}
		return m.Hits[0].Key
	}
	long := keyOf(strings.Repeat("victim-tenant-", 20))
	_, hashed, ok := strings.Cut(long, "=")
	if !ok || !strings.Contains(hashed, "sha256:") {
		t.Fatalf("a long value counted as %q, want its hash", long)
	}
	// Every spelling a client could send of the hashed part.
	for _, v := range []string{hashed, strings.TrimPrefix(hashed, "%"), "%" + hashed} {
		if k := keyOf(v); k == long {
			t.Errorf("X-Tenant %q counted on the long value's counter %q", v, long)
		}
	}
}
