package guard_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/guard"
)

// TestFloodOfClientsKeepsTheDenial: a flood of distinct clients (through
// a trusted proxy, so each is a key of its own) past the memory the
// policy gives the store never frees a client that its limit is holding
// back: the memory bound evicts the others first.
func TestFloodOfClientsKeepsTheDenial(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, `version: 1
server:
  trusted_proxies: [127.0.0.1/32, "::1/128"]
  memory: {max_bytes: 1048576}
limits:
  - {name: per-client, rate: 2, per: 1h}
`)
	url := serveGuard(t, newGuard(t, guard.File(file), guard.Options{ReloadInterval: -1}))
	c := &http.Client{}
	attacker := map[string]string{"X-Forwarded-For": "198.51.100.7"}
	for range 2 {
		do(t, c, "GET", url+"/", attacker)
	}
	if a := do(t, c, "GET", url+"/", attacker); a.status != http.StatusTooManyRequests {
		t.Fatalf("the attacker's third request: %v", a)
	}
	const clients = 20000
	for i := range clients {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		if a := do(t, c, "GET", url+"/", map[string]string{"X-Forwarded-For": ip}); a.status != http.StatusOK {
			t.Fatalf("client %s: %v", ip, a)
		}
	}
	if a := do(t, c, "GET", url+"/", attacker); a.status != http.StatusTooManyRequests || !strings.Contains(a.rl, "r=0") {
		t.Errorf("the attacker after %d other clients: %v, want still 429", clients, a)
	}
	// The flood did go past the bound: some of its first clients were
	// forgotten (a fresh key has 1 unit left after a request; one that
	// was kept has none).
	forgotten := 0
	for i := range 200 {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		if a := do(t, c, "GET", url+"/", map[string]string{"X-Forwarded-For": ip}); strings.Contains(a.rl, "r=1") {
			forgotten++
		}
	}
	if forgotten == 0 {
		t.Errorf("none of the flood's first 200 clients was forgotten: the memory bound was never reached")
	}
}

// TestHugeHeaders: header fields near net/http's 1 MiB bound are read as
// any other: two keys of 400 KiB that differ in their last byte are
// counted apart, and the same one together (the engine keeps a hash of a
// long key); a forwarded chain of 40,000 trusted hops names the client at
// its start. Neither is echoed in the answer's fields.
func TestHugeHeaders(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, `version: 1
server:
  trusted_proxies: [127.0.0.1/32, "::1/128"]
limits:
  - {name: tenant, rate: 2, per: 1h, key: "header:X-Tenant", match: {paths: [/t]}}
  - {name: per-client, rate: 2, per: 1h, match: {paths: [/c]}}
`)
	url := serveGuard(t, newGuard(t, guard.File(file), guard.Options{ReloadInterval: -1}))
	c := &http.Client{}
	long := strings.Repeat("a", 400<<10)
	for _, tenant := range []string{long + "1", long + "2"} {
		for i, want := range []int{200, 200, 429} {
			a := do(t, c, "GET", url+"/t", map[string]string{"X-Tenant": tenant})
			if a.status != want || len(a.rl) > 100 {
				t.Errorf("tenant ...%s, request %d: %d (fields of %d bytes), want %d", tenant[len(tenant)-1:], i+1, a.status, len(a.rl), want)
			}
		}
	}
	chain := "198.51.100.9" + strings.Repeat(", 127.0.0.1", 40000)
	for i, want := range []int{200, 200, 429} {
		if a := do(t, c, "GET", url+"/c", map[string]string{"X-Forwarded-For": chain}); a.status != want {
			t.Errorf("a chain of 40,000 trusted hops, request %d: %v, want %d", i+1, a, want)
		}
	}
	if a := do(t, c, "GET", url+"/c", map[string]string{"X-Forwarded-For": "198.51.100.10"}); a.status != 200 {
		t.Errorf("another client: %v", a)
	}
}
