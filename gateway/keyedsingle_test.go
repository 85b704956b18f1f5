package gateway

import (
	"net/http"
	"sync"
	"testing"
)

// TestKeyedSingleFieldsOnce: a limit may count by User-Agent or
// Content-Type (key: header:NAME) as by any other field, and a request
// carrying such a field twice is refused with 400 before anything is
// charged, on every front, as for X-Tenant (TestKeyedFieldsOnce). The
// edge engine's parser keeps one line of these fields (the last), so its
// count of their lines said one: the request was charged by its last line
// and served where the other fronts refuse it.
func TestKeyedSingleFieldsOnce(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testKeyedSingleFieldsOnce)
}

func testKeyedSingleFieldsOnce(t *testing.T, fr string) {
	p := compilePolicy(t, "keyed-single.yaml", `version: 1
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: per-agent, rate: 1, per: 1h, burst: 1, key: "header:User-Agent", match: {paths: ["/ua"]}}
  - {name: per-type, rate: 1, per: 1h, burst: 1, key: "header:Content-Type", match: {paths: ["/ct"]}}
`)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	served := map[string]int{}
	_, base, _ := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
		func(_ http.ResponseWriter, r *http.Request) {
			mu.Lock()
			served[r.URL.Path]++
			mu.Unlock()
		})
	for _, c := range []struct{ path, field string }{{"/ua", "User-Agent"}, {"/ct", "Content-Type"}} {
		for i, fields := range []string{
			c.field + ": other\r\n" + c.field + ": acme\r\n",
			c.field + ": acme\r\n" + c.field + ": acme\r\n",
			c.field + ": \r\n" + c.field + ": acme\r\n",
		} {
			status := rawStatus(t, base, "GET "+c.path+" HTTP/1.1\r\nHost: a.example\r\n"+fields+"\r\n")
			if status != http.StatusBadRequest {
				t.Errorf("%s %d %q: status %d, want 400", c.path, i, fields, status)
			}
		}
		// Nothing was charged: acme's one request passes, its second not.
		if status := rawStatus(t, base, "GET "+c.path+" HTTP/1.1\r\nHost: a.example\r\n"+c.field+": acme\r\n\r\n"); status != 200 {
			t.Errorf("%s: acme's one request: %d, want 200", c.path, status)
		}
		if status := rawStatus(t, base, "GET "+c.path+" HTTP/1.1\r\nHost: a.example\r\n"+c.field+": acme\r\n\r\n"); status != 429 {
			t.Errorf("%s: acme's second request: %d, want 429", c.path, status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if served["/ua"] != 1 || served["/ct"] != 1 {
		t.Errorf("the upstream served %v, want each path once", served)
	}
}
