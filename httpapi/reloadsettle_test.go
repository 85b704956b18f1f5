package httpapi

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/floodgate/floodgate/limiter"
)

// TestSettleAcrossAReloadThatChangedItsLimit: a reservation is settled on
// the limit it was made on, as the gateway settles a request in flight
// across a reload, whatever the reload did to that limit (a changed limit
// counts afresh): shrunk below the estimate, the settle above the
// estimate charges what fits and reports the overrun, never 422
// never_fits; removed, the settle gives the rest back, never 404. A
// reservation made after the reload settles on the new limit. On the
// embedded store and on Redis.
func TestSettleAcrossAReloadThatChangedItsLimit(t *testing.T) {
	t.Parallel()
	policy := func(burst int) string {
		return fmt.Sprintf(`version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: tokens, algorithm: token_bucket, rate: 1, per: 1h, burst: %d, key: global, actual: {header: X-Used}}
  - {name: other, algorithm: fixed_window, limit: 10, window: 1h, key: global}
`, burst)
	}
	const removed = `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: other, algorithm: fixed_window, limit: 10, window: 1h, key: global}
`
	memURL, _, memReload := policyAPI(t, policy(100))
	redis, _ := redisEngine(t, limiter.Options{})
	redisURL, redisReload := policyAPIOn(t, policy(100), redis)
	for _, c := range []struct {
		store  string
		url    string
		reload func(string)
	}{{"memory", memURL, memReload}, {"Redis", redisURL, redisReload}} {
		reserve := func(key string, cost int) string {
			t.Helper()
			resp, m := post(t, c.url+"/v1/reserve", fmt.Sprintf(`{"limit":"tokens","key":%q,"cost":%d}`, key, cost))
			tok, _ := m["reservation"].(string)
			if resp.StatusCode != http.StatusOK || tok == "" {
				t.Fatalf("%s: reserve %d: %d %v", c.store, cost, resp.StatusCode, m)
			}
			return tok
		}
		settle := func(what, tok string, actual int, capacity, remaining, overrun float64) {
			t.Helper()
			resp, m := post(t, c.url+"/v1/settle", fmt.Sprintf(`{"reservation":%q,"actual":%d}`, tok, actual))
			ds, _ := m["decisions"].([]any)
			if resp.StatusCode != http.StatusOK || m["overrun"] != overrun || len(ds) != 1 {
				t.Errorf("%s: %s: %d %v, want 200 with overrun %v", c.store, what, resp.StatusCode, m, overrun)
				return
			}
			if d := ds[0].(map[string]any); d["capacity"] != capacity || d["remaining"] != remaining {
				t.Errorf("%s: %s: %v, want capacity %v, %v left", c.store, what, d, capacity, remaining)
			}
		}
		shrunk, gone := reserve("a", 80), reserve("b", 30)
		resp, m := post(t, c.url+"/v1/reserve", `{"hits":[{"limit":"tokens","key":"c","cost":5},{"limit":"other","key":"c"}]}`)
		both, _ := m["reservation"].(string)
		if resp.StatusCode != http.StatusOK || both == "" {
			t.Fatalf("%s: reserve of both limits: %d %v", c.store, resp.StatusCode, m)
		}
		c.reload(policy(50)) // below the first estimate
		// One limit changed, the other not: settled whole.
		if resp, m := post(t, c.url+"/v1/settle", fmt.Sprintf(`{"reservation":%q,"actual":1}`, both)); resp.StatusCode != http.StatusOK || m["settled"] != true {
			t.Errorf("%s: a reservation of a changed and an unchanged limit: %d %v, want 200", c.store, resp.StatusCode, m)
		}
		after := reserve("a", 40)
		settle("130 of 80 reserved before the limit shrank to 50", shrunk, 130, 100, 0, 30)
		settle("60 of 40 reserved after it shrank", after, 60, 50, 0, 10)
		c.reload(removed)
		settle("10 of 30 reserved before the limit was removed", gone, 10, 100, 90, 0)
	}
}
