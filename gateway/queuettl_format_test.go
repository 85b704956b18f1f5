package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate/floodgate/config"
)

// formatQueuePolicy is a route for /login that admits one request at a
// time, with a queue of one place and a wait of 400 ms, under
// server.format_suffix: ignore and a limit on /login.json that counts the
// answers 200 and 503 (count_on: a reservation that lives reserve_ttl,
// the %s). The gateway reads /login.json as /login, and the limit's
// pattern as "/login": the limit applies to every request of the route.
const formatQueuePolicy = `
server: {format_suffix: ignore}
routes:
  - name: login
    match: {paths: ["/login"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tiers: [{name: default}]
      queue: {size: 1, per_tenant: 1, max_wait: 400ms}
limits:
  - {name: answered, algorithm: sliding_log, limit: 4, window: 1h, count_on: [200, 503], reserve_ttl: %s, match: {paths: ["/login.json"]}}
`

// TestQueuedReservationOfASuffixedLimit: a limit on /login.json applies,
// under server.format_suffix: ignore, to the requests of a route for
// /login, so a reserve_ttl not longer than that route's overload max_wait
// is refused at load, named by file, line and field, as for a limit on
// /login (a waiter's reservation would expire at its estimate and its
// charge be kept when it is shed). With a reserve_ttl that outlives the
// wait, a request for /login.json that waits in the queue and is shed at
// max_wait gives back what it reserved: one request for /login held and
// answered 200, the waiter shed, then a request that finds the limit
// charged with the 200 and its own reservation alone.
func TestQueuedReservationOfASuffixedLimit(t *testing.T) {
	_, err := config.Parse("format.yaml", []byte(fmt.Sprintf(formatQueuePolicy, "100ms")))
	if want := `format.yaml:12:103: limits[0].reserve_ttl: reserve_ttl 100ms is not longer than the max_wait 400ms of the overload queue of route "login"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a reserve_ttl of 100ms on /login.json beside a 400ms queue on /login: %v; want %q", err, want)
	}
	forFronts(t, allFronts, func(t *testing.T, front string) {
		if r := shedSuffixedWaiter(t, front, "1m"); r != 2 {
			t.Errorf("answered: %d remaining after one 200 and a shed waiter for /login.json, want 2 (the 200 and the request's own reservation)", r)
		}
	})
}

// shedSuffixedWaiter serves formatQueuePolicy with reserve_ttl ttl: a
// request for /login held until a request for /login.json has waited in
// the queue and been shed, then a request for /login whose remaining of
// the limit it returns.
func shedSuffixedWaiter(t *testing.T, front, ttl string) int64 {
	u := newHolding()
	var once sync.Once
	release := func() { once.Do(func() { close(u.release) }) }
	t.Cleanup(release)
	ended := make(endLog, 8)
	pm := mustPolicyMatcher(t, compilePolicy(t, "format.yaml", fmt.Sprintf(formatQueuePolicy, ttl)))
	g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t), AccessLog: ended}, u.ServeHTTP)

	held := getLater(t, c, base+"/login")
	pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
	waited := getLater(t, c, base+"/login.json")
	pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })
	checkShed(t, <-waited, "1")
	if s := ended.wait(t); s != http.StatusServiceUnavailable {
		t.Fatalf("a request ended with %d before the held one was let go, want the waiter's 503", s)
	}
	release()
	if a := <-held; a.status != http.StatusOK {
		t.Fatalf("the held request: %d, want 200", a.status)
	}
	ended.wait(t)
	a, err := get(c, t.Context(), base+"/login")
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusOK {
		t.Fatalf("the request after: %d %q, want 200", a.status, a.body)
	}
	ended.wait(t)
	return remaining(t, a, "answered")
}
