package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// onRedis serves the API over a Redis store on a redis-server of its own
// (returned, to be paused), with a limit "tokens" of 1,000 units (1 an
// hour) and a concurrency limit "slot" of 1. The engine's store deadline
// (5s) outlasts every pause of the tests; opts tunes it further.
func onRedis(t *testing.T, opts limiter.Options) (string, *redistest.Server) {
	t.Helper()
	eng, rs := redisEngine(t, opts)
	limits := Rules(
		ruletest.Rule(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1000}),
		ruletest.Rule(t, floodgate.Limit{Name: "slot", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Minute}),
	)
	ts := httptest.NewServer(New(eng, limits, Options{}))
	t.Cleanup(ts.Close)
	return ts.URL, rs
}

// redisEngine returns an engine over a Redis store on a redis-server of
// its own (returned, to be paused), with a store deadline of 5s; opts
// tunes it further.
func redisEngine(t *testing.T, opts limiter.Options) (*limiter.Limiter, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t)
	t.Cleanup(rs.Resume) // before the server stops, should a test fail while it is paused
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + rs.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opts.Timeout = 5 * time.Second
	return limiter.New(st, opts), rs
}

// postAndLeave posts body to path on a connection of its own and closes
// it after stay, without reading anything.
func postAndLeave(t *testing.T, base, path, body string, stay time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: floodgate\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, len(body), body); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stay)
}

// freeTokens returns the units of "tokens" free for key once they reach
// want, or what is free after 5s.
func freeTokens(t *testing.T, url, key string, want float64) float64 {
	t.Helper()
	var free float64
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, m := post(t, url+"/v1/peek", `{"limit":"tokens","key":"`+key+`"}`)
		free = m["remaining"].(float64) + 1 // the peek counts its unit as taken
		if free == want || time.Now().After(end) {
			return free
		}
	}
}

// TestReserveWhoseCallerLeftIsGivenBack: a caller that leaves while its
// reservation is being made (here Redis stalls under the call) never
// receives the token that would settle it; the reservation is given back
// rather than held at its estimate, with its concurrency slot, until its
// ttl.
func TestReserveWhoseCallerLeftIsGivenBack(t *testing.T) {
	t.Parallel()
	url, rs := onRedis(t, limiter.Options{})
	rs.Pause()
	postAndLeave(t, url, "/v1/reserve", `{"hits":[{"limit":"tokens","key":"k","cost":800},{"limit":"slot","key":"k"}]}`, 300*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the server sees the connection close
	rs.Resume()
	if free := freeTokens(t, url, "k", 1000); free != 1000 {
		t.Errorf("a reservation of 800 whose caller left before its answer: %v of 1000 free, want 1000", free)
	}
	// The peeks may be decided before the stalled reserve is (Redis reads
	// its connections in no set order once resumed), and the give-back
	// comes after the reserve's answer: the slot must come free within
	// the wait, far sooner than the reservation's ttl would free it.
	var resp *http.Response
	var m map[string]any
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, m = post(t, url+"/v1/reserve", `{"limit":"slot","key":"k"}`); resp.StatusCode == 200 || time.Now().After(end) {
			break
		}
	}
	if resp.StatusCode != 200 {
		t.Errorf("the slot of a reservation whose caller left: another reserve is %d %v, want it free", resp.StatusCode, m)
	}
}

// TestSettleWhoseCallerLeftIsApplied: a settle whose caller posts it and
// leaves before the store is asked (here it waits for an in-flight slot
// that a call stalled on Redis holds) is applied once the store answers,
// as a settle that reached the store before the caller left is, rather
// than dropped with the reservation held at its estimate until its ttl.
func TestSettleWhoseCallerLeftIsApplied(t *testing.T) {
	t.Parallel()
	url, rs := onRedis(t, limiter.Options{MaxInFlight: 1})
	resp, m := post(t, url+"/v1/reserve", `{"limit":"tokens","key":"s","cost":500}`)
	tok, _ := m["reservation"].(string)
	if resp.StatusCode != 200 || tok == "" {
		t.Fatalf("reserve: %d %v", resp.StatusCode, m)
	}
	rs.Pause()
	var wg sync.WaitGroup
	wg.Go(func() { post(t, url+"/v1/check", `{"limit":"tokens","key":"other"}`) }) // holds the one slot
	time.Sleep(200 * time.Millisecond)
	postAndLeave(t, url, "/v1/settle", `{"reservation":"`+tok+`","cancel":true}`, 300*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	rs.Resume()
	wg.Wait()
	if free := freeTokens(t, url, "s", 1000); free != 1000 {
		t.Errorf("a cancel of a reservation of 500 posted by a caller that left: %v of 1000 free, want 1000", free)
	}
}

// TestCheckWhoseCallerLeftStands: a check whose caller leaves while it is
// decided (Redis stalls under the call) keeps what it charged once Redis
// answers, as Envoy's rate-limit service keeps a call whose client timed
// out: the caller may have gone ahead by its own failure policy. Unlike
// a reservation, it is not given back.
func TestCheckWhoseCallerLeftStands(t *testing.T) {
	t.Parallel()
	url, rs := onRedis(t, limiter.Options{})
	rs.Pause()
	postAndLeave(t, url, "/v1/check", `{"limit":"tokens","key":"c","cost":800}`, 300*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the server sees the connection close
	rs.Resume()
	if free := freeTokens(t, url, "c", 200); free != 200 {
		t.Fatalf("a check of 800 whose caller left before its answer: %v of 1000 free, want 200 (the charge stands)", free)
	}
	// Redis applied it before the server read its answer: what the
	// server does then must not give it back either.
	time.Sleep(500 * time.Millisecond)
	if free := freeTokens(t, url, "c", 200); free != 200 {
		t.Errorf("a check of 800 whose caller left, once answered: %v of 1000 free, want 200 (the charge stands)", free)
	}
}
