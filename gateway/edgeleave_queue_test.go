package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestQueuedClientShutsItsSideDown: a client that sends its request and
// shuts its side of the connection down (as a client may once it has
// nothing more to send) while the request waits in a leaky queue has left:
// its request never reaches the upstream, its place is given back, and it
// gets no answer, the connection closed (it got a 200 with no body, which
// it would read as its request served), on both engines.
func TestQueuedClientShutsItsSideDown(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 3})
		store := newMemStore(t, newTestClock().Now)
		var reached atomic.Int64
		_, srvURL, client := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: limiter.New(store, limiter.Options{})},
			func(w http.ResponseWriter, r *http.Request) {
				reached.Add(1)
				_, _ = io.WriteString(w, "served")
			})
		if a := do(t, client, "GET", srvURL, nil); a.status != 200 {
			t.Fatalf("first request %d", a.status)
		}
		leaveQueued(t, strings.TrimPrefix(srvURL, "http://"), store, rule, &reached, 0)
	})
}

// leaveQueued queues a request on a connection of its own at addr, whose
// gateway holds rule's leaky queue on store with its first place taken
// (the request of key "k" served, reached counting 1), waits wait once
// the request has its place, shuts that connection's side down, and
// checks that the request left unanswered, never reached the upstream and
// gave its place back.
func leaveQueued(t *testing.T, addr string, store *memstore.Store, rule *limiter.Rule, reached *atomic.Int64, wait time.Duration) {
	t.Helper()
	nextDelay := func() time.Duration { return nextPlace(t, store, rule) }
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); nextDelay() != 2*time.Minute; {
		if time.Now().After(deadline) {
			t.Fatalf("the request never took its place in the queue (next place %v out)", nextDelay())
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(wait)
	leavesUnanswered(t, c, "queued")
	if n := reached.Load(); n != 1 {
		t.Errorf("the upstream was reached %d times, want 1 (the queued request never goes on)", n)
	}
	if d := nextDelay(); d != time.Minute {
		t.Errorf("the next place is %v out, want 1m0s: the place of the request whose client left was not given back", d)
	}
}

// nextPlace returns how long the next request of key "k" would wait in
// rule's leaky queue on store, taking no place.
func nextPlace(t *testing.T, store *memstore.Store, rule *limiter.Rule) time.Duration {
	t.Helper()
	out := make([]floodgate.Decision, 1)
	if err := store.Decide(context.Background(), []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}, true, out); err != nil {
		t.Fatal(err)
	}
	return out[0].Delay
}

// countingQueueGateway is a gateway limiting every request by rule on
// store, in front of an upstream that answers "served" and counts the
// requests that reach it (reached).
func countingQueueGateway(t *testing.T, rule *limiter.Rule, store *memstore.Store) (g *Gateway, reached *atomic.Int64) {
	t.Helper()
	reached = new(atomic.Int64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "served")
	}))
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	g, err := New(Options{Matcher: MatcherFunc(withUpstream{oneRule(rule), upURL}.Match), Engine: limiter.New(store, limiter.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	return g, reached
}

// TestOverloadQueuedClientShutsItsSideDown: the same for a request waiting
// for a place under its route's overload control: it leaves the queue,
// never reaches the upstream, and gets no answer, the connection closed.
func TestOverloadQueuedClientShutsItsSideDown(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, front string) { queuedClientLeaves(t, front, "", false) })
}

// queuedClientLeaves holds one request at the upstream of a route whose
// overload control admits one, queues a second on a connection of its
// own, sends pipelined after it (nothing when empty), shuts that
// connection's side down, and checks that the second request left the
// queue unanswered and never reached the upstream. connCtx serves the
// net/http engine from a server with ConnContext, as floodgate serve does.
func queuedClientLeaves(t *testing.T, front, pipelined string, connCtx bool) {
	u := newHolding()
	g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 1
tiers: [{name: default}]
queue: {size: 4, per_tenant: 4, max_wait: 60s}`), u.ServeHTTP)
	if connCtx {
		base = withConnContext(t, front, g, base)
	}
	var once sync.Once
	release := func() { once.Do(func() { close(u.release) }) }
	t.Cleanup(release) // a test that fails lets the held request go too
	held := make(chan error, 1)
	go func() {
		_, err := get(c, t.Context(), base+"/held")
		held <- err
	}()
	pollUntil(t, "the first request to be held", func() bool { return u.now.Load() == 1 })
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "the second request to wait", func() bool { return overloadState(g).Queued == 1 })
	if _, err := io.WriteString(conn, pipelined); err != nil {
		t.Fatal(err)
	}
	leavesUnanswered(t, conn, "waiting for a place")
	pollUntil(t, "the queue to empty", func() bool { return overloadState(g).Queued == 0 })
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if n := u.served.Load(); n != 1 {
		t.Errorf("the upstream served %d requests, want 1 (the one that left never goes on)", n)
	}
}

// leavesUnanswered shuts the client's side of conn down, as a client that
// leaves does, and checks that the gateway closes the connection without
// an answer; while is what the request was doing.
func leavesUnanswered(t *testing.T, conn net.Conn, while string) {
	t.Helper()
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was kept open; the gateway sent %q", got)
	}
	if len(got) > 0 {
		t.Errorf("a client that left while %s was answered %q, want no answer", while, got)
	}
}

// TestLeakyQueueLeftAsSlotCameIsLeft: a client that left at the moment
// its request's slot in a leaky queue came has left, whichever the wait
// sees first: its request never reaches the upstream, it gets no answer,
// and its place is given back, so the next request's delay is the one it
// would have been. The wait is held (leakyWaitHook) until the client is
// seen gone and the delay has passed, so both have happened when it
// looks; each front does it a dozen times, as either might be seen first.
func TestLeakyQueueLeftAsSlotCameIsLeft(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		const interval = 20 * time.Millisecond
		rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: interval, Burst: 100})
		store := newMemStore(t, newTestClock().Now) // its clock stands still
		g, reached := countingQueueGateway(t, rule, store)
		g.leakyWaitHook = func(gone <-chan struct{}) {
			select {
			case <-gone:
			case <-time.After(20 * time.Second):
				t.Error("the gateway never saw the waiting client leave")
			}
			time.Sleep(interval) // the delay has passed too
		}
		srvURL := serveFront(t, fr, g, nil)
		nextDelay := func() time.Duration { return nextPlace(t, store, rule) }
		if a := do(t, newClient(t), "GET", srvURL, nil); a.status != 200 {
			t.Fatalf("first request %d", a.status)
		}
		want := nextDelay()
		if want != interval {
			t.Fatalf("the next request would wait %v, want %v", want, interval)
		}
		for i := range 12 {
			c, err := net.Dial("tcp", strings.TrimPrefix(srvURL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			pollUntil(t, "the request to take its place in the queue", func() bool { return nextDelay() != want })
			leavesUnanswered(t, c, "its slot came")
			c.Close()
			if n := reached.Load(); n != 1 {
				t.Fatalf("leave %d: the upstream was reached %d times, want 1 (a request whose client left is not forwarded)", i, n)
			}
			if d := nextDelay(); d != want {
				t.Fatalf("leave %d: the next request would wait %v, want %v: the place of the client that left was not given back", i, d, want)
			}
		}
	})
}
