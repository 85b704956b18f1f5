package gateway

import (
	"net/http"
	"sync/atomic"
	"testing"
)

// TestHeadCountsAgainstGetLimits: a HEAD request is limited as a GET one
// by a route or limit whose match names GET, on each front, as the
// upstream answers HEAD with its GET handler (net/http's ServeMux pattern
// "GET /x" here; Flask and Express do the same) and the answer's status
// and fields are GET's (RFC 9110 §9.3.2). Before 2026-12-06 a match of
// methods [GET] did not match HEAD: past a limit of 2 an hour on
// GET /exists, HEAD /exists?name=alice still reached the upstream and got
// its 200 (and 404 for a name it does not know), and HEAD /lookup took the
// catch-all route's loose limit to the same handler past the GET route's.
func TestHeadCountsAgainstGetLimits(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testHeadCountsAgainstGetLimits)
}

func testHeadCountsAgainstGetLimits(t *testing.T, fr string) {
	var exists, lookup atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /exists", func(w http.ResponseWriter, r *http.Request) {
		exists.Add(1)
		if r.URL.Query().Get("name") != "alice" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("yes\n"))
	})
	mux.HandleFunc("GET /lookup", func(w http.ResponseWriter, r *http.Request) {
		lookup.Add(1)
		_, _ = w.Write([]byte("found\n"))
	})
	base := policyFront(t, fr, "head.yaml", `version: 1
routes:
  - {name: lookup, match: {methods: [GET], paths: ["/lookup"]}, upstream: "http://127.0.0.1:9"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: lookup, match: {routes: [lookup]}, algorithm: fixed_window, limit: 2, window: 1h, key: global}
  - {name: exists, match: {methods: [GET], paths: ["/exists"]}, algorithm: fixed_window, limit: 2, window: 1h, key: global}
  - {name: loose, match: {routes: [rest]}, algorithm: fixed_window, limit: 1000, window: 1h, key: global}
`, mux.ServeHTTP)
	c := newClient(t)
	do := func(method, target string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// The limit on GET /exists: two GETs spend it, then HEAD is refused.
	for i, want := range []int{200, 404} {
		if got := do("GET", []string{"/exists?name=alice", "/exists?name=bob"}[i]); got != want {
			t.Fatalf("GET /exists #%d: %d, want %d", i+1, got, want)
		}
	}
	for _, name := range []string{"alice", "bob", "carol"} {
		if got := do("HEAD", "/exists?name="+name); got != http.StatusTooManyRequests {
			t.Errorf("HEAD /exists?name=%s past the GET limit: %d, want 429", name, got)
		}
	}
	if n := exists.Load(); n != 2 {
		t.Errorf("the upstream's /exists was asked %d times, want 2", n)
	}
	// The GET route /lookup: HEADs spend its limit, then GET is refused;
	// HEAD never takes the catch-all route to the same handler.
	for i := range 2 {
		if got := do("HEAD", "/lookup"); got != 200 {
			t.Fatalf("HEAD /lookup #%d: %d, want 200", i+1, got)
		}
	}
	for _, method := range []string{"HEAD", "GET", "HEAD"} {
		if got := do(method, "/lookup"); got != http.StatusTooManyRequests {
			t.Errorf("%s /lookup past the GET route's limit: %d, want 429", method, got)
		}
	}
	if n := lookup.Load(); n != 2 {
		t.Errorf("the upstream's /lookup was asked %d times, want 2", n)
	}
}
