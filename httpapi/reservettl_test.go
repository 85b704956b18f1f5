package httpapi

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// policyAPI serves the check API over the limits of the policy file src,
// on a real loopback listener and an embedded store whose clock reads
// now (set to fixedNow). reload writes a new version of the file and
// applies it, as SIGHUP does.
func policyAPI(t *testing.T, src string) (url string, now *atomic.Int64, reload func(src string)) {
	t.Helper()
	now = new(atomic.Int64)
	now.Store(fixedNow)
	st, err := memstore.New(memstore.Options{Now: now.Load, SweepInterval: -1, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	url, reload = policyAPIOn(t, src, limiter.New(st, limiter.Options{}))
	return url, now, reload
}

// policyAPIOn is policyAPI over the engine eng.
func policyAPIOn(t *testing.T, src string, eng limiter.Engine) (url string, reload func(src string)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(src string) {
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(src)
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(New(eng, PolicyLimits(rl.Policy), Options{}))
	t.Cleanup(ts.Close)
	return ts.URL, func(src string) {
		t.Helper()
		write(src)
		if err := rl.Reload(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReserveTakesTheLimitsReserveTTL: a reservation made without a
// "ttl" is held for its limit's reserve_ttl, as the gateway holds its
// reservations of that limit (the longest of its limits' when it names
// several), not for a fixed 300 s; a "ttl" the request gives still wins.
func TestReserveTakesTheLimitsReserveTTL(t *testing.T) {
	t.Parallel()
	url, now, _ := policyAPI(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: short, algorithm: fixed_window, limit: 100, window: 1h, key: global, actual: {header: X-Used}, reserve_ttl: 2s}
  - {name: long, algorithm: fixed_window, limit: 100, window: 1h, key: global, actual: {header: X-Used}, reserve_ttl: 1h}
  - {name: plain, algorithm: fixed_window, limit: 100, window: 1h, key: global}
`)
	reserve := func(body string) string {
		t.Helper()
		resp, m := post(t, url+"/v1/reserve", body)
		tok, _ := m["reservation"].(string)
		if resp.StatusCode != http.StatusOK || tok == "" {
			t.Fatalf("reserve %s: %d %v", body, resp.StatusCode, m)
		}
		return tok
	}
	settle := func(what, tok string, want int) {
		t.Helper()
		if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","cancel":true}`); resp.StatusCode != want {
			t.Errorf("settle of %s: %d %v, want %d", what, resp.StatusCode, m, want)
		}
	}
	short := reserve(`{"limit":"short","key":"global","cost":10}`)
	shortAsked := reserve(`{"limit":"short","key":"global","cost":10,"ttl":900}`)
	long := reserve(`{"limit":"long","key":"global","cost":10}`)
	both := reserve(`{"hits":[{"limit":"short","key":"global","cost":10},{"limit":"long","key":"global","cost":10}]}`)
	plain := reserve(`{"limit":"plain","key":"global","cost":10}`)
	plainLate := reserve(`{"limit":"plain","key":"global","cost":10}`)

	now.Add(int64(3 * time.Second))
	settle("a reservation of short (reserve_ttl 2s) 3 s later", short, http.StatusNotFound)
	now.Add(int64(4 * time.Minute))
	settle("a reservation of plain (no reserve_ttl) 4 min later", plain, http.StatusOK)
	now.Add(int64(6 * time.Minute))
	settle("a reservation of short with ttl 900, 10 min later", shortAsked, http.StatusOK)
	settle("a reservation of long (reserve_ttl 1h) 10 min later", long, http.StatusOK)
	settle("a reservation of short and long 10 min later", both, http.StatusOK)
	settle("a reservation of plain (no reserve_ttl) 10 min later", plainLate, http.StatusNotFound)
}
