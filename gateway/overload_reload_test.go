package gateway

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// swapSource is a PolicySource whose policy a test replaces, as a reload
// does.
type swapSource struct{ p atomic.Pointer[policy.Policy] }

func (s *swapSource) Policy() *policy.Policy { return s.p.Load() }

// TestOverloadReloadKeepsCap: a reload that changes a route's overload
// block while requests are in flight and waiting keeps counting them under
// the route's cap: a cap lowered from 2 to 1 with two requests in flight
// lets no new request reach the upstream until fewer than one are in
// flight; the requests that waited under the old block are served, none
// is lost; the route has one controller (one series of each gauge); and a
// request that waited in a tier the new block no longer has is answered.
func TestOverloadReloadKeepsCap(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		before := "server:\n  trusted_proxies: [127.0.0.1/32]\n" + overloadPolicy(`
limit: 2
tier_header: X-Priority
tiers:
  - {name: critical}
  - {name: default}
  - {name: sheddable}
queue: {size: 8, per_tenant: 8, max_wait: 30s}`)
		after := "server:\n  trusted_proxies: [127.0.0.1/32]\n" + overloadPolicy(`
limit: 1
tiers: [{name: default}]
queue: {size: 8, per_tenant: 8, max_wait: 30s}`)
		src := &swapSource{}
		src.p.Store(compilePolicy(t, "overload.yaml", before))
		pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, u.ServeHTTP)
		var wg sync.WaitGroup
		var mu sync.Mutex
		answers := map[string]int{}
		send := func(who, tier string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Who", who, "X-Priority", tier)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				answers[who] = a.status
				mu.Unlock()
			})
		}
		send("a", "default")
		send("b", "default")
		pollUntil(t, "2 in flight", func() bool { return u.now.Load() == 2 })
		send("w", "sheddable")
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })

		src.p.Store(compilePolicy(t, "overload.yaml", after))
		g.ForgetUpstreams()
		send("n", "")
		pollUntil(t, "2 queued after the reload", func() bool {
			return overloadState(g).Queued == 2 || u.now.Load() > 2
		})
		if n := u.now.Load(); n > 2 {
			t.Errorf("the upstream holds %d requests after the cap went from 2 to 1 with 2 in flight", n)
		}
		n := 0
		g.OverloadStats(func(s OverloadStat) {
			n++
			if s.Limit != 1 || s.Inflight != 2 {
				t.Errorf("after the reload: %+v, want limit 1 and 2 in flight", s)
			}
		})
		if n != 1 {
			t.Errorf("%d controllers for the one route after the reload, want 1", n)
		}
		close(u.release)
		wg.Wait()
		for _, who := range []string{"a", "b", "w", "n"} {
			if answers[who] != http.StatusOK {
				t.Errorf("%s: status %d, want 200 (all: %v)", who, answers[who], answers)
			}
		}
		if top := u.top.Load(); top > 2 {
			t.Errorf("the upstream held %d requests at once, want at most 2", top)
		}
	})
}

// TestOverloadReloadShrinksQueue: a reload whose queue holds fewer than
// wait keeps as many as it holds, in turn, and sheds the rest at once
// (503, queue_full), as it would have refused them on arrival; one that
// drops the queue sheds every waiter that does not fit under the cap
// (full). None waits out its max_wait.
func TestOverloadReloadShrinksQueue(t *testing.T) {
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		u := newHolding()
		block := func(queue string) string {
			return overloadPolicy("limit: 1\ntiers: [{name: default}]\ntenant: header:X-Who\n" + queue)
		}
		src := &swapSource{}
		src.p.Store(compilePolicy(t, "overload.yaml", block("queue: {size: 4, per_tenant: 4, max_wait: 60s}")))
		pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, u.ServeHTTP)
		var wg sync.WaitGroup
		var shed atomic.Int64
		send := func(who string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Who", who)
				if err != nil {
					t.Error(err)
					return
				}
				if a.status == http.StatusServiceUnavailable {
					shed.Add(1)
				}
			})
		}
		send("held")
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		for _, who := range []string{"a", "b", "c", "d"} {
			send(who)
		}
		pollUntil(t, "4 queued", func() bool { return overloadState(g).Queued == 4 })

		src.p.Store(compilePolicy(t, "overload.yaml", block("queue: {size: 2, per_tenant: 1, max_wait: 60s}")))
		g.ForgetUpstreams()
		// A request looks the new block up (and is refused: the queue is full).
		if a, err := get(c, t.Context(), base+"/y", "X-Who", "z"); err != nil || a.status != http.StatusServiceUnavailable {
			t.Errorf("a request over the cap with the queue full: %v %v, want 503", a.status, err)
		}
		pollUntil(t, "2 shed", func() bool { return shed.Load() >= 2 })
		if s := overloadState(g); s.Queued != 2 || s.Inflight != 1 {
			t.Errorf("after the reload: %+v, want 2 queued and 1 in flight", s)
		}

		src.p.Store(compilePolicy(t, "overload.yaml", block("")))
		g.ForgetUpstreams()
		a, err := get(c, t.Context(), base+"/y", "X-Who", "y")
		if err != nil {
			t.Fatal(err)
		}
		if a.status != http.StatusServiceUnavailable {
			t.Errorf("over the cap without a queue: %d, want 503", a.status)
		}
		pollUntil(t, "every waiter shed", func() bool { return shed.Load() == 4 })
		if s := overloadState(g); s.Queued != 0 || s.Inflight != 1 {
			t.Errorf("after the reload without a queue: %+v, want nothing queued and 1 in flight", s)
		}
		close(u.release)
		wg.Wait()
		if top := u.top.Load(); top != 1 {
			t.Errorf("the upstream held %d requests at once, want 1", top)
		}
	})
}

// TestOverloadReloadKeepsArrivalOrder: a reload that changes a route's
// overload block keeps its waiters in the order they arrived, so the
// waiter a more critical request displaces afterwards is still the last
// to arrive, not the last in turn: a1 and a2 of tenant a, then b1 of
// tenant b, wait (in turn a1, b1, a2); after the reload a critical
// request finds the queue full and displaces b1.
func TestOverloadReloadKeepsArrivalOrder(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := &gatedUpstream{}
		block := func(maxWait string) string {
			return "server:\n  trusted_proxies: [127.0.0.1/32]\n" + overloadPolicy(`
limit: 1
tier_header: X-Priority
tenant: header:X-Tenant
tiers: [{name: critical}, {name: sheddable}]
queue: {size: 3, per_tenant: 3, max_wait: `+maxWait+`}`)
		}
		src := &swapSource{}
		src.p.Store(compilePolicy(t, "overload.yaml", block("60s")))
		pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, u.ServeHTTP)
		var wg sync.WaitGroup
		var mu sync.Mutex
		answers := map[string]int{}
		send := func(who, tenant, tier string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Who", who, "X-Tenant", tenant, "X-Priority", tier)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				answers[who] = a.status
				mu.Unlock()
			})
		}
		all := []string{"h", "a1", "a2", "b1", "c1"}
		var once sync.Once
		release := func() {
			once.Do(func() {
				for _, who := range all {
					u.open(who)
				}
				wg.Wait()
			})
		}
		defer release()
		send("h", "h", "sheddable")
		pollUntil(t, "1 in flight", func() bool { return u.holding() == 1 })
		for i, w := range [][2]string{{"a1", "a"}, {"a2", "a"}, {"b1", "b"}} {
			send(w[0], w[1], "sheddable")
			pollUntil(t, w[0]+" waiting", func() bool { return overloadState(g).Queued == i+1 })
		}
		src.p.Store(compilePolicy(t, "overload.yaml", block("61s")))
		g.ForgetUpstreams()
		send("c1", "c", "critical")
		pollUntil(t, "a sheddable waiter displaced", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(answers) > 0
		})
		mu.Lock()
		got := maps.Clone(answers)
		mu.Unlock()
		if len(got) != 1 || got["b1"] != http.StatusServiceUnavailable {
			t.Errorf("answered %v; want b1 (the last to arrive) displaced (503), a1 and a2 still waiting", got)
		}
		release()
		for _, who := range all {
			want := http.StatusOK
			if who == "b1" {
				want = http.StatusServiceUnavailable
			}
			if answers[who] != want {
				t.Errorf("%s: status %d, want %d (all: %v)", who, answers[who], want, answers)
			}
		}
	})
}

// TestOverloadReloadKeepsLearntLimit: a reload that changes a route's
// adaptive options keeps the limit it learnt, within the new bounds, and
// does not start it again from its initial value: an upstream answering
// 502 cuts a limit of 16 to its minimum of 2; after a reload with other
// options (min 1, initial 16) it is still 2, not 16, which would send
// eight times as many requests at once to the failing upstream; a reload
// that raises min to 4 lifts it to 4, and one that lowers max to 3 brings
// it down to 3.
func TestOverloadReloadKeepsLearntLimit(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }
		block := func(adaptive string) *policy.Policy {
			return compilePolicy(t, "overload.yaml", overloadPolicy(`
adaptive: {`+adaptive+`, window: 20ms}
tiers: [{name: default}]
queue: {size: 64, per_tenant: 64, max_wait: 1s}`))
		}
		src := &swapSource{}
		src.p.Store(block("min: 2, max: 32, initial: 16, min_samples: 10"))
		pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, h)
		stop := drive(t, base+"/x", func(status int) bool {
			return status == http.StatusBadGateway || status == http.StatusServiceUnavailable
		})
		defer stop()
		pollUntil(t, "the limit at its minimum", func() bool { return overloadState(g).Limit == 2 })
		stop()
		pollUntil(t, "nothing held", func() bool { s := overloadState(g); return s.Inflight == 0 && s.Queued == 0 })

		for _, step := range []struct {
			adaptive string
			want     int
		}{
			{"min: 1, max: 32, initial: 16, min_samples: 11", 2},
			{"min: 4, max: 32, initial: 16, min_samples: 12", 4},
			{"min: 1, max: 3, initial: 2, min_samples: 13", 3},
		} {
			src.p.Store(block(step.adaptive))
			g.ForgetUpstreams()
			// A request looks the new block up; one answer ends no window.
			if a, err := get(c, t.Context(), base+"/x"); err != nil || a.status != http.StatusBadGateway {
				t.Fatalf("after the reload to {%s}: %v %v, want 502", step.adaptive, a.status, err)
			}
			s := overloadState(g)
			if s.Limit != step.want || !s.Adaptive {
				t.Errorf("after the reload to {%s}: %+v, want the adaptive limit at %d", step.adaptive, s, step.want)
			}
		}
	})
}

// TestOverloadReloadKeepsEachWaitersMaxWait: a request waiting in the
// overload queue keeps the max_wait it began its wait under, whatever a
// reload sets: a waiter of a 60 s queue is still waiting after a reload
// to 1 s has shed a request that waited 1 s under it, and a waiter of the
// 1 s queue is shed at its 1 s after a reload back to 61 s, not kept for
// a minute. Both waiters of the longer waits are served once the request
// in flight ends.
func TestOverloadReloadKeepsEachWaitersMaxWait(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		block := func(maxWait string) *policy.Policy {
			return compilePolicy(t, "overload.yaml", overloadPolicy(`
limit: 1
tiers: [{name: default}]
queue: {size: 8, per_tenant: 8, max_wait: `+maxWait+`}`))
		}
		src := &swapSource{}
		src.p.Store(block("60s"))
		pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, u.ServeHTTP)
		var wg sync.WaitGroup
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }); wg.Wait() }
		defer release()
		var mu sync.Mutex
		answers := map[string]int{}
		send := func(who string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Who", who)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				answers[who] = a.status
				mu.Unlock()
			})
		}
		answered := func(who string) (int, bool) {
			mu.Lock()
			defer mu.Unlock()
			s, ok := answers[who]
			return s, ok
		}
		send("held")
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		send("w60")
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })

		src.p.Store(block("1s"))
		g.ForgetUpstreams()
		send("w1") // looks the new block up, and waits 1 s under it
		pollUntilFor(t, "the 1 s waiter shed", 10*time.Second, func() bool { _, ok := answered("w1"); return ok })
		if s, ok := answered("w60"); ok {
			t.Errorf("the waiter of the 60 s queue was answered %d after a reload to 1 s; want it still waiting", s)
		}
		if s := overloadState(g); s.Queued != 1 {
			t.Errorf("state %+v, want the waiter of the 60 s queue alone queued", s)
		}

		send("w1b")
		pollUntil(t, "2 queued", func() bool { return overloadState(g).Queued == 2 })
		src.p.Store(block("61s"))
		g.ForgetUpstreams()
		send("w61") // looks the new block up
		pollUntilFor(t, "the 1 s waiter shed after a reload to 61 s", 10*time.Second, func() bool {
			_, ok := answered("w1b")
			return ok
		})
		release()
		want := map[string]int{"held": http.StatusOK, "w60": http.StatusOK, "w1": http.StatusServiceUnavailable,
			"w1b": http.StatusServiceUnavailable, "w61": http.StatusOK}
		for who, code := range want {
			if answers[who] != code {
				t.Errorf("%s: status %d, want %d (all: %v)", who, answers[who], code, answers)
			}
		}
	})
}

// TestOverloadReloadKeepsNoLoadLatency: a reload that changes the
// adaptive options (here only its tolerance) keeps the limit's estimate of
// the upstream's no-load latency, as it keeps its limit. Started again,
// the limit forgot it: its first window's latency was not trusted and it
// grew by half a window until one queued, then halved, so a reload under
// a flood sent half as many again as the knee it had found to the
// upstream (measured: 12 and 18 in flight to an upstream of 8 workers
// where 9 and 12 were before), then cut to 4 to 6.
func TestOverloadReloadKeepsNoLoadLatency(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * time.Millisecond)
			_, _ = w.Write([]byte("ok"))
		}
		block := func(extra string) *policy.Policy {
			return compilePolicy(t, "overload.yaml", overloadPolicy(`
adaptive: {min: 2, max: 32, initial: 16, window: 20ms, min_samples: 10`+extra+`}
tiers: [{name: default}]
queue: {size: 64, per_tenant: 64, max_wait: 1s}`))
		}
		src := &swapSource{}
		src.p.Store(block(""))
		pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, h)
		stop := drive(t, base+"/x", func(status int) bool { return status == http.StatusOK })
		defer stop()
		pollUntilFor(t, "an estimate of the no-load latency", time.Minute, func() bool { return overloadState(g).NoLoad > 0 })
		stop()
		pollUntil(t, "nothing held", func() bool { s := overloadState(g); return s.Inflight == 0 && s.Queued == 0 })
		before := overloadState(g)

		src.p.Store(block(", tolerance: 1.5"))
		g.ForgetUpstreams()
		// A request looks the new block up; one answer ends no window of
		// ten.
		if a, err := get(c, t.Context(), base+"/x"); err != nil || a.status != http.StatusOK {
			t.Fatalf("after the reload: %v %v", a.status, err)
		}
		if s := overloadState(g); !s.Adaptive || s.NoLoad == 0 {
			t.Errorf("after a reload that changed the tolerance: %+v (before it %+v); want the estimate of the no-load latency kept", s, before)
		}
	})
}

// TestOverloadReloadReachesTheWaiters: a reload puts its overload block
// in force at once for the requests waiting, without waiting for a new
// request of the route to look it up. One that takes the route's block
// away lets the waiter go on to the upstream at once (nothing caps the
// route now: a new request passes beside the two), where it waited out
// its max_wait, to be shed with 503, while new requests passed. One that
// raises the cap from 1 to 2 gives the waiter the new place at once.
func TestOverloadReloadReachesTheWaiters(t *testing.T) {
	const noBlock = `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
limits:
  - {name: per-ip, rate: 1000000000, burst: 1000000000}
`
	for name, after := range map[string]string{
		"removed": noBlock,
		"raised":  overloadPolicy("limit: 2\ntiers: [{name: default}]\nqueue: {size: 4, per_tenant: 4, max_wait: 60s}"),
	} {
		t.Run(name, func(t *testing.T) {
			forFronts(t, allFronts, func(t *testing.T, front string) {
				u := newHolding()
				src := &swapSource{}
				src.p.Store(compilePolicy(t, "overload.yaml", overloadPolicy("limit: 1\ntiers: [{name: default}]\nqueue: {size: 4, per_tenant: 4, max_wait: 60s}")))
				pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
				if err != nil {
					t.Fatal(err)
				}
				g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, u.ServeHTTP)
				var once sync.Once
				release := func() { once.Do(func() { close(u.release) }) }
				t.Cleanup(release) // before the servers close, if the test fails
				held := getLater(t, c, base+"/held")
				pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
				waiter := getLater(t, c, base+"/waits")
				pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })

				src.p.Store(compilePolicy(t, "overload.yaml", after))
				g.ForgetUpstreams()
				if s := overloadState(g); s.Queued != 0 || s.Inflight != 2 {
					t.Errorf("right after the reload: %+v, want nothing queued and 2 in flight (the waiter went on)", s)
				}
				pollUntilFor(t, "the waiter at the upstream", 10*time.Second, func() bool { return u.now.Load() == 2 })
				var later <-chan answer
				if name == "removed" {
					later = getLater(t, c, base+"/new")
					pollUntil(t, "the new request at the upstream", func() bool { return u.now.Load() == 3 })
				}
				release()
				for what, ch := range map[string]<-chan answer{"held": held, "waiter": waiter, "new": later} {
					if ch == nil {
						continue
					}
					if a := <-ch; a.status != http.StatusOK {
						t.Errorf("%s: %d, want 200", what, a.status)
					}
				}
				pollUntil(t, "nothing held", func() bool { return overloadState(g).Inflight == 0 })
			})
		})
	}
}

// TestOverloadReloadLiftsRequestsMatchedBefore: a request matched before
// a reload that takes its route's overload block away, which reaches the
// control only after it (it waited in a leaky queue meanwhile), is not
// capped either: it goes on at once beside the request held and the
// waiter the reload let go, where it waited behind them under the cap no
// request keeps any more. A reload that brings the block back as it was
// caps the route again.
func TestOverloadReloadLiftsRequestsMatchedBefore(t *testing.T) {
	const limits = `
limits:
  - {name: shaper, algorithm: leaky_queue, rate: 1, per: 50ms, burst: 4, key: global, match: {paths: ["/late"]}}
`
	before := overloadPolicy("limit: 1\ntiers: [{name: default}]\nqueue: {size: 4, per_tenant: 4, max_wait: 60s}") + strings.TrimPrefix(limits, "\nlimits:\n")
	after := `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
` + limits
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		var cur atomic.Pointer[holdingUpstream] // the upstream now
		cur.Store(u)
		serve := func(w http.ResponseWriter, r *http.Request) { cur.Load().ServeHTTP(w, r) }
		src := &swapSource{}
		src.p.Store(compilePolicy(t, "overload.yaml", before))
		pm, err := NewPolicyMatcher(src, PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if front != frontMiddleware {
			up := httptest.NewServer(http.HandlerFunc(serve))
			t.Cleanup(up.Close)
			pm.upstream, _ = url.Parse(up.URL)
		}
		g, err := New(Options{Matcher: pm, Engine: memEngine(t)})
		if err != nil {
			t.Fatal(err)
		}
		delayed, reloaded := make(chan struct{}), make(chan struct{})
		g.leakyWaitHook = func(<-chan struct{}) {
			close(delayed)
			<-reloaded
		}
		base := serveFront(t, front, g, serve)
		c := newClient(t)
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }) }
		t.Cleanup(release)

		held := getLater(t, c, base+"/held")
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		waiter := getLater(t, c, base+"/late") // the shaper lets it through at once
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })
		late := getLater(t, c, base+"/late") // the shaper holds it 50 ms
		<-delayed
		src.p.Store(compilePolicy(t, "overload.yaml", after))
		g.ForgetUpstreams()
		close(reloaded)
		pollUntilFor(t, "the late request at the upstream beside the two", 10*time.Second, func() bool { return u.now.Load() == 3 })
		release()
		for what, ch := range map[string]<-chan answer{"held": held, "waiter": waiter, "late": late} {
			if a := <-ch; a.status != http.StatusOK {
				t.Errorf("%s: %d, want 200", what, a.status)
			}
		}

		u2 := newHolding()
		cur.Store(u2)
		var once2 sync.Once
		release2 := func() { once2.Do(func() { close(u2.release) }) }
		t.Cleanup(release2)
		src.p.Store(compilePolicy(t, "overload.yaml", before))
		g.ForgetUpstreams()
		held = getLater(t, c, base+"/held")
		pollUntil(t, "1 in flight again", func() bool { return u2.now.Load() == 1 })
		waiter = getLater(t, c, base+"/waits")
		pollUntil(t, "1 queued under the block brought back", func() bool { return overloadState(g).Queued == 1 || u2.now.Load() > 1 })
		if n := u2.now.Load(); n != 1 {
			t.Errorf("the upstream holds %d requests under the block brought back with its cap of 1", n)
		}
		release2()
		<-held
		<-waiter
	})
}
