package gateway

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// shedCostPolicy is a route that admits one request at a time, with a
// queue of one place and a short wait, under a limit that counts the
// answers 200 and 503 (count_on: a reservation) and a plain rate of four
// an hour per client.
const shedCostPolicy = `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tiers: [{name: default}]
      queue: {size: 1, per_tenant: 1, max_wait: 300ms}
limits:
  - {name: answered, algorithm: sliding_log, limit: 4, window: 1h, count_on: [200, 503]}
  - {name: per-ip, rate: 4, per: 1h, burst: 4}
`

// TestOverloadShedGivesReservationBack: a request shed by overload
// control got no upstream answer, so what it reserved goes back in full,
// although the limit counts the answers 200 and 503 (count_on) and the
// shed itself is a 503 written by no upstream; its plain charge is given
// back too (TestOverloadShedSpendsNoVictimsLimits). One request is held in
// flight and answered 200, a second waits and is shed at max_wait
// (timeout), a third is refused at once (tenant_full); the next request
// finds the counted limit charged with the 200 and its own reservation
// alone, and the plain rate charged for the two requests served. On a
// frozen clock, so nothing refills meanwhile.
func TestOverloadShedGivesReservationBack(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }) }
		t.Cleanup(release)
		ended := make(endLog, 8)
		pm := mustPolicyMatcher(t, compilePolicy(t, "overload.yaml", shedCostPolicy))
		engine := limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{})
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: engine, AccessLog: ended}, u.ServeHTTP)

		held := getLater(t, c, base+"/held")
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		waited := getLater(t, c, base+"/waits")
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })
		refused, err := get(c, t.Context(), base+"/refused")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, refused, "1")
		checkShed(t, <-waited, "1")
		for range 2 { // both sheds settled
			if s := ended.wait(t); s != http.StatusServiceUnavailable {
				t.Fatalf("a request ended with %d before the held one was let go, want 503", s)
			}
		}
		release()
		if a := <-held; a.status != http.StatusOK {
			t.Fatalf("the held request: %d, want 200", a.status)
		}
		ended.wait(t)

		a, err := get(c, t.Context(), base+"/after")
		if err != nil {
			t.Fatal(err)
		}
		if a.status != http.StatusOK {
			t.Fatalf("the request after: %d %q, want 200", a.status, a.body)
		}
		ended.wait(t)
		// The held request's 200 and this one's reservation: the two
		// requests shed were given back.
		if r := remaining(t, a, "answered"); r != 2 {
			t.Errorf("answered: %d remaining after one 200 and two sheds, want 2 (the 200 and the request's own reservation)", r)
		}
		// Held and this one: the two sheds' plain charges were given back.
		if r := remaining(t, a, "per-ip"); r != 2 {
			t.Errorf("per-ip: %d remaining after two requests served and two shed, want 2", r)
		}
	})
}

// TestOverloadWaiterHoldsItsConcurrency: a request waiting in the
// overload queue holds what its limits gave it, as one in flight does: a
// concurrency limit of two counts it, so with one request held and one
// waiting a third is refused by the limit (429) and never reaches the
// queue; once the waiter is shed at max_wait its place under the limit
// comes back, so the next request is admitted by the limit (it waits for
// the cap, and is served) instead of finding the limit still full.
func TestOverloadWaiterHoldsItsConcurrency(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }) }
		t.Cleanup(release)
		ended := make(endLog, 8)
		pm := mustPolicyMatcher(t, compilePolicy(t, "overload.yaml", overloadPolicy(`
limit: 1
tiers: [{name: default}]
queue: {size: 4, per_tenant: 4, max_wait: 1s}`)+`
  - {name: two-at-a-time, algorithm: concurrency, limit: 2, key: global}
`))
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t), AccessLog: ended}, u.ServeHTTP)

		held := getLater(t, c, base+"/held")
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		waited := getLater(t, c, base+"/waits")
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })
		third, err := get(c, t.Context(), base+"/third")
		if err != nil {
			t.Fatal(err)
		}
		if third.status != http.StatusTooManyRequests {
			t.Errorf("a third request beside one held and one waiting: %d, want 429 (the waiter holds its concurrency)", third.status)
		}
		if s := overloadState(g); s.Queued != 1 {
			t.Errorf("state %+v, want the one waiter queued", s)
		}
		if a := <-waited; a.status != http.StatusServiceUnavailable {
			t.Fatalf("the waiter: %d, want 503 at max_wait", a.status)
		}
		ended.wait(t) // the third
		ended.wait(t) // the waiter: its lease given back

		next := getLater(t, c, base+"/next")
		var a answer
		pollUntil(t, "the next request to wait or be answered", func() bool {
			select {
			case a = <-next:
				return true
			default:
				return overloadState(g).Queued == 1
			}
		})
		release()
		if a.status == 0 {
			a = <-next
		}
		if a.status != http.StatusOK {
			t.Errorf("the next request after the waiter was shed: %d, want 200 (the waiter's concurrency came back)", a.status)
		}
		if h := <-held; h.status != http.StatusOK {
			t.Errorf("the held request: %d, want 200", h.status)
		}
	})
}

// floodPolicy is a route that admits one request at a time, with a queue
// of two places (one a client) and a short wait, under a rate of one an
// hour per client address with a burst of four; the clients' addresses
// come from X-Forwarded-For.
const floodPolicy = `
server:
  trusted_proxies: [127.0.0.1]
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tiers: [{name: default}]
      queue: {size: 2, per_tenant: 1, max_wait: 200ms}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 4}
`

// TestOverloadShedSpendsNoVictimsLimits: an attacker that floods a route
// makes its overload control shed a victim's requests (one waits and is
// shed at max_wait, three are refused at once for the victim's backlog);
// no upstream served them, and the capacity was the attacker's doing, so
// they spend none of the victim's rate: after the flood the victim's next
// request is served with three of its four left, on memory and on Redis.
func TestOverloadShedSpendsNoVictimsLimits(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		testShedSpendsNoVictimsLimits(t, front, limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), floodPolicy)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		testShedSpendsNoVictimsLimits(t, frontNetHTTP, limiter.New(store, limiter.Options{Timeout: 2 * time.Second}), floodPolicy)
	})
}

// windowLimits are the victim's limit of four in TestOverloadShedGivesWindowsBack
// and TestQueuedClientGivesWindowsBack: a fixed window, a sliding log, a
// sliding window of an hour and a daily quota.
var windowLimits = []struct{ name, limit string }{
	{"fixed_window", "{name: per-ip, algorithm: fixed_window, limit: 4, window: 1h}"},
	{"sliding_log", "{name: per-ip, algorithm: sliding_log, limit: 4, window: 1h}"},
	{"sliding_window", "{name: per-ip, algorithm: sliding_window, limit: 4, window: 1h}"},
	{"quota", "{name: per-ip, algorithm: quota, limit: 4, period: DAY}"},
}

// TestOverloadShedGivesWindowsBack is TestOverloadShedSpendsNoVictimsLimits
// with the victim's limit a fixed window, a sliding log, a sliding window
// and a daily quota, on memory and on Redis: the four shed requests spend
// none of them, as they spend none of a rate (their charges are given back
// from the window, log or period that counted them), so an attacker who
// makes overload control shed a victim's requests cannot spend the
// victim's quota for the day.
func TestOverloadShedGivesWindowsBack(t *testing.T) {
	srv := redistest.Start(t)
	for _, w := range windowLimits {
		policy := strings.Replace(floodPolicy, "{name: per-ip, rate: 1, per: 1h, burst: 4}", w.limit, 1)
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			forFronts(t, allFronts, func(t *testing.T, front string) {
				testShedSpendsNoVictimsLimits(t, front, limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), policy)
			})
			t.Run("redis", func(t *testing.T) {
				t.Parallel()
				store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr, Prefix: "shed-" + w.name + ":"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(store.Close)
				testShedSpendsNoVictimsLimits(t, frontNetHTTP, limiter.New(store, limiter.Options{Timeout: 2 * time.Second}), policy)
			})
		})
	}
}

func testShedSpendsNoVictimsLimits(t *testing.T, front string, engine *limiter.Limiter, policy string) {
	u := newHolding()
	var once sync.Once
	release := func() { once.Do(func() { close(u.release) }) }
	t.Cleanup(release)
	pm := mustPolicyMatcher(t, compilePolicy(t, "flood.yaml", policy))
	g, base, c := startFront(t, front, Options{Matcher: pm, Engine: engine}, u.ServeHTTP)
	attacker := []string{"X-Forwarded-For", "192.0.2.1"}
	victim := []string{"X-Forwarded-For", "192.0.2.2"}

	held := getLater(t, c, base+"/held", attacker...)
	pollUntil(t, "the attacker's request in flight", func() bool { return u.now.Load() == 1 })
	waiting := getLater(t, c, base+"/waits", attacker...)
	pollUntil(t, "the attacker's request queued", func() bool { return overloadState(g).Queued == 1 })
	for range 6 {
		if a, err := get(c, t.Context(), base+"/flood", attacker...); err != nil || a.status == http.StatusOK {
			t.Fatalf("the attacker's flood: %d %v, want a refusal", a.status, err)
		}
	}
	waited := getLater(t, c, base+"/victim", victim...)
	pollUntil(t, "the victim's request queued", func() bool { return overloadState(g).Queued == 2 })
	for range 3 {
		a, err := get(c, t.Context(), base+"/victim", victim...)
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "1")
	}
	w := <-waited
	checkShed(t, w, "1")
	if r := remaining(t, w, "per-ip"); r != 4 {
		t.Errorf("the victim's waiter shed at max_wait says %d remaining, want 4 (its unit given back)", r)
	}
	<-waiting
	release()
	if a := <-held; a.status != http.StatusOK {
		t.Fatalf("the attacker's held request: %d, want 200", a.status)
	}

	a, err := get(c, t.Context(), base+"/after", victim...)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusOK {
		t.Fatalf("the victim after the flood: %d %q, want 200 (its four shed requests spent its burst of four)", a.status, a.body)
	}
	if r := remaining(t, a, "per-ip"); r != 3 {
		t.Errorf("the victim after the flood: %d of 4 remaining, want 3 (this request alone charged)", r)
	}
}

// TestOverloadShedFieldsSayTheRefund: a shed request's RateLimit fields
// say what its limits hold once its charge is given back, so a client
// that paces itself by them (client.Pacer) is not held back for units it
// has: with an attacker holding the route's only place, a victim's
// request waits, holding one of its four units; a second, refused at once
// for its backlog, says three remain (not two) and the next comes in an
// hour, and the waiter, shed at max_wait, says four.
func TestOverloadShedFieldsSayTheRefund(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		pm := mustPolicyMatcher(t, compilePolicy(t, "flood.yaml", floodPolicy))
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{})}, u.ServeHTTP)
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }) }
		t.Cleanup(release)
		victim := []string{"X-Forwarded-For", "192.0.2.2"}

		held := getLater(t, c, base+"/held", "X-Forwarded-For", "192.0.2.1")
		pollUntil(t, "the attacker's request in flight", func() bool { return u.now.Load() == 1 })
		waited := getLater(t, c, base+"/waits", victim...)
		pollUntil(t, "the victim's request queued", func() bool { return overloadState(g).Queued == 1 })
		a, err := get(c, t.Context(), base+"/refused", victim...)
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "1")
		// Three remain (its own unit given back, the waiter's held), the
		// next in an hour.
		checkFields(t, a, "per-ip", 3, 3600, 0)
		w := <-waited
		checkShed(t, w, "1")
		if r := remaining(t, w, "per-ip"); r != 4 {
			t.Errorf("the waiter shed at max_wait says %d remaining, want 4 (its unit given back)", r)
		}
		release()
		<-held
	})
}

// shedWindowPolicy is a route that admits one request at a time, with a
// queue of one place that a critical request takes from a default one,
// and a route beside it without overload control; one fixed window of
// four an hour per client counts the requests of both.
const shedWindowPolicy = `
server:
  trusted_proxies: [127.0.0.1]
routes:
  - name: free
    match: {paths: ["/free"]}
    upstream: http://127.0.0.1:9
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tier_header: X-Priority
      tiers: [{name: critical}, {name: default}]
      queue: {size: 1, per_tenant: 1, max_wait: 60s}
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 4, window: 1h}
`

// TestOverloadShedFieldsSayTheWindowOfTheAnswer: a request charged in one
// window that waits in the queue past the window's end, and is shed then,
// answers with the RateLimit fields of the window its 503 is answered in,
// not those of the window it arrived in: its refund went to the window
// that ended, and the new one holds what the client spent since. With an
// attacker holding the route's only place, a victim's request waits from
// 10:00 (three of its four left, the window ends in an hour); at 11:30 the
// victim spends two on a route beside it (two left, the window ends in
// half an hour), and the waiter, displaced by a critical request, says two
// remain and the window ends in 1,800 s.
func TestOverloadShedFieldsSayTheWindowOfTheAnswer(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := &gatedUpstream{}
		clk := newTestClock()
		pm := mustPolicyMatcher(t, compilePolicy(t, "flood.yaml", shedWindowPolicy))
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: limiter.New(newMemStore(t, clk.Now), limiter.Options{})}, u.ServeHTTP)
		var once sync.Once
		release := func() { once.Do(func() { u.open("held"); u.open("critical") }) }
		t.Cleanup(release)
		victim := []string{"X-Forwarded-For", "192.0.2.2"}

		held := getLater(t, c, base+"/held", "X-Forwarded-For", "192.0.2.1", "X-Who", "held")
		pollUntil(t, "the attacker's request in flight", func() bool { return u.holding() == 1 })
		waited := getLater(t, c, base+"/waits", victim...)
		pollUntil(t, "the victim's request queued", func() bool { return overloadState(g).Queued == 1 })

		clk.Advance(90 * time.Minute) // 11:30: the waiter's window ended at 11:00
		u.open("free")
		for i, want := range []int64{3, 2} {
			a, err := get(c, t.Context(), base+"/free", append(victim, "X-Who", "free")...)
			if err != nil {
				t.Fatal(err)
			}
			if a.status != http.StatusOK {
				t.Fatalf("the victim's request %d beside the queue: %d %q, want 200", i+1, a.status, a.body)
			}
			checkFields(t, a, "per-ip", want, 1800, 0)
		}
		critical := getLater(t, c, base+"/critical", "X-Forwarded-For", "192.0.2.3", "X-Who", "critical", "X-Priority", "critical")
		w := <-waited
		checkShed(t, w, "60")
		// Two remain in the window of 11:00 (the waiter's unit went back
		// to the window of 10:00), which ends in half an hour.
		checkFields(t, w, "per-ip", 2, 1800, 0)
		release()
		for _, ch := range []<-chan answer{held, critical} {
			if a := <-ch; a.status != http.StatusOK {
				t.Errorf("a held request: %d %q, want 200", a.status, a.body)
			}
		}
	})
}

// TestOverloadAdmittedFieldsCountFromTheAnswer: a request charged as it
// arrives that waits in the queue and is then admitted goes upstream with
// the RateLimit fields of the moment it leaves the queue, not of its
// arrival. With an attacker holding the route's only place, a victim's
// request waits from 10:00 (three of four left in a window that ends in
// an hour). Let go after 10 minutes, it says three remain and the window
// ends in 3,000 s, worked out from its own decision with no call to the
// store. Let go at 11:30, after its client spent two on a route beside it
// in the window of 11:00, it says two remain and the window ends in
// 1,800 s, from one look at the limit that charges nothing (its own unit
// went to the window of 10:00, which has ended).
func TestOverloadAdmittedFieldsCountFromTheAnswer(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		for _, tc := range []struct {
			name  string
			wait  time.Duration // how long the victim's request waits
			spent int64         // what its client spends beside the queue meanwhile
			r, t  int64         // its answer's fields
			looks int64         // the looks at the limits its admission takes
		}{
			{"within its window", 10 * time.Minute, 0, 3, 3000, 0},
			{"past its window", 90 * time.Minute, 2, 2, 1800, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				u := &gatedUpstream{}
				clk := newTestClock()
				var looks atomic.Int64
				obs := limiter.ObserverFunc(func(req *limiter.Request, _ *limiter.Result) {
					if req.Peek {
						looks.Add(1)
					}
				})
				pm := mustPolicyMatcher(t, compilePolicy(t, "flood.yaml", shedWindowPolicy))
				engine := limiter.New(newMemStore(t, clk.Now), limiter.Options{Observer: obs})
				g, base, c := startFront(t, front, Options{Matcher: pm, Engine: engine, Now: clk.Time}, u.ServeHTTP)
				var once sync.Once
				release := func() { once.Do(func() { u.open("held") }) }
				t.Cleanup(release)
				victim := []string{"X-Forwarded-For", "192.0.2.2"}
				u.open("waits")
				u.open("free")

				held := getLater(t, c, base+"/held", "X-Forwarded-For", "192.0.2.1", "X-Who", "held")
				pollUntil(t, "the attacker's request in flight", func() bool { return u.holding() == 1 })
				waited := getLater(t, c, base+"/waits", append(victim, "X-Who", "waits")...)
				pollUntil(t, "the victim's request queued", func() bool { return overloadState(g).Queued == 1 })

				clk.Advance(tc.wait)
				for i := range tc.spent {
					a, err := get(c, t.Context(), base+"/free", append(victim, "X-Who", "free")...)
					if err != nil {
						t.Fatal(err)
					}
					if a.status != http.StatusOK {
						t.Fatalf("the victim's request %d beside the queue: %d %q, want 200", i+1, a.status, a.body)
					}
					checkFields(t, a, "per-ip", 3-i, 1800, 0)
				}
				release()
				w := <-waited
				if w.status != http.StatusOK || w.body != "ok" {
					t.Fatalf("the waiter: %d %q, want the upstream's 200", w.status, w.body)
				}
				checkFields(t, w, "per-ip", tc.r, tc.t, 0)
				if n := looks.Load(); n != tc.looks {
					t.Errorf("%d looks at the limits, want %d", n, tc.looks)
				}
				if a := <-held; a.status != http.StatusOK {
					t.Errorf("the attacker's request: %d %q, want 200", a.status, a.body)
				}
			})
		}
	})
}
