package redisstore

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/redis/rueidis"
)

// TestClusterStartsWhileDown: a store opened while no node of its Redis
// Cluster answers starts all the same, decides by each limit's failure
// policy, at once, until the Cluster answers, then counts there; the
// client it lent before (Store.Client) works then too, and so do its
// slot map and its eviction check. New used to fail ("redisstore:
// connect"), so that every process restarted during a Cluster outage
// stayed down whatever its failure policies said.
func TestClusterStartsWhileDown(t *testing.T) {
	cl, err := redistest.NewCluster("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	each(cl.Nodes, (*redistest.Server).Stop) // their ports are known and nothing listens there
	url := "redis+cluster://" + strings.Join(cl.Addrs(), ",")
	testStartsWhileDown(t, url, func() {
		var mu sync.Mutex
		var errs []error
		each(cl.Nodes, func(n *redistest.Server) {
			if err := n.Restart(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
	}, func(s *Store, key string) {
		if s.Mode() != Cluster {
			t.Errorf("mode %s, want cluster", s.Mode())
		}
	})
}

// TestSentinelStartsWhileDown is TestClusterStartsWhileDown for a primary
// found through a sentinel, both down when the store is opened.
func TestSentinelStartsWhileDown(t *testing.T) {
	primary := redistest.Start(t)
	sen := redistest.StartSentinel(t, primary, "fgdown")
	sen.Stop()
	primary.Stop()
	testStartsWhileDown(t, "redis+sentinel://"+sen.Addr+"/fgdown", func() {
		if err := primary.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := sen.Restart(); err != nil {
			t.Fatal(err)
		}
	}, func(s *Store, key string) {
		if v, err := primary.Do("EXISTS", key); err != nil || v != "1" {
			t.Errorf("the counter on the primary: %q, %v; want it there", v, err)
		}
	})
}

// testStartsWhileDown opens a store on url while nothing answers there,
// checks its decisions and its client, calls up to start the deployment,
// and checks that the store then counts in Redis; check looks at the
// store and at the key of the counter then.
func testStartsWhileDown(t *testing.T, url string, up func(), check func(s *Store, key string)) {
	var logs syncBuffer
	prefix := uniquePrefix(t)
	s, err := New(Options{URL: url, Prefix: prefix, DialTimeout: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("New with %s down: %v; want a store that decides by policy until Redis answers", url, err)
	}
	defer s.Close()
	rc := s.Client() // lent before Redis answers, used after
	open := ruletest.With(t, floodgate.Limit{Name: "down-open", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 2},
		limiter.RuleOptions{OnFailure: floodgate.FailOpen})
	closed := ruletest.With(t, floodgate.Limit{Name: "down-closed", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 2},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	const timeout = 500 * time.Millisecond
	lim := limiter.New(s, limiter.Options{Timeout: timeout,
		Breaker: limiter.BreakerOptions{Failures: 3, ProbeInterval: 50 * time.Millisecond}})
	decide := func(r *limiter.Rule, key string) (*limiter.Result, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res := new(limiter.Result)
		start := time.Now()
		if err := lim.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: r, Key: key, Cost: 1}}}, res); err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return res, time.Since(start)
	}

	// Down: each limit's policy decides, at once (no dial waited for,
	// nor the engine's deadline).
	for i := range 4 {
		if r, took := decide(open, "k"); !r.Allowed || r.Degraded == limiter.NotDegraded || took >= timeout/2 {
			t.Fatalf("fail-open decision %d with Redis down: allowed %v, degraded %v, in %v; want allowed by the policy, at once",
				i, r.Allowed, r.Degraded, took)
		}
		if r, took := decide(closed, "k"); r.Allowed || r.Degraded == limiter.NotDegraded || took >= timeout/2 {
			t.Fatalf("fail-closed decision %d with Redis down: allowed %v, degraded %v, in %v; want refused by the policy, at once",
				i, r.Allowed, r.Degraded, took)
		}
	}
	out := make([]floodgate.Decision, 1)
	start := time.Now()
	if err := s.Decide(context.Background(), []limiter.Hit{{Rule: open, Key: "direct", Cost: 1}}, false, out); err == nil {
		t.Fatal("the store decided with Redis down")
	} else if took := time.Since(start); took >= timeout/2 {
		t.Fatalf("the store took %v to fail with Redis down (%v); want at once", took, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.Do(ctx, rc.B().Get().Key("{"+prefix+"}client").Build()).Error(); err == nil {
		t.Fatal("the store's client answered with Redis down")
	}
	early := rc.B().Get().Key("{" + prefix + "}early").Build() // built before Redis answers, sent after
	if e := s.CheckEviction(ctx); e.Err == nil {
		t.Errorf("the eviction check with Redis down: %+v; want that it cannot tell", e)
	}
	// Still down after a few attempts to connect.
	time.Sleep(time.Second)
	if r, took := decide(open, "k"); !r.Allowed || r.Degraded == limiter.NotDegraded || took >= timeout/2 {
		t.Fatalf("fail-open decision a second later: allowed %v, degraded %v, in %v", r.Allowed, r.Degraded, took)
	}
	if err := rc.Do(ctx, rc.B().Get().Key("{"+prefix+"}client").Build()).Error(); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("the store's client a second later: %v; want the dial's error", err)
	}

	up()

	// Up: within 30 s the decisions are Redis', on every node: the nodes
	// of a Cluster come back one by one, so the wait asks the slot of the
	// key counted below too (through the other limit, whose key has the
	// same hash tag: its bucket is not the one counted).
	deadline := time.Now().Add(30 * time.Second)
	for {
		r1, _ := decide(open, "probe")
		r2, _ := decide(closed, "counted")
		if r1.Degraded == limiter.NotDegraded && r2.Degraded == limiter.NotDegraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after Redis came back, decisions are still made by the failure policy; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	allowed := 0
	for i := range 4 {
		r, _ := decide(open, "counted")
		if r.Degraded != limiter.NotDegraded {
			t.Fatalf("decision %d degraded (%v) with Redis back; log:\n%s", i, r.Degraded, logs.String())
		}
		if r.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("%d of 4 allowed by a bucket of 2 once Redis came back; want 2", allowed)
	}
	// The count is Redis': a second store sees it.
	s2, err := New(Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatalf("a second store with Redis up: %v", err)
	}
	defer s2.Close()
	if err := s2.Decide(ctx, []limiter.Hit{{Rule: open, Key: "counted", Cost: 1}}, true, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Allowed || out[0].Remaining != 0 {
		t.Errorf("a second store sees %+v; want the bucket the first one emptied", out[0])
	}
	check(s, s.Key(open, "counted"))

	// The client lent before Redis answered is Redis' now.
	key := "{" + prefix + "}client"
	if err := rc.Do(ctx, rc.B().Set().Key(key).Value("v").Build()).Error(); err != nil {
		t.Fatalf("SET through the client lent before Redis answered: %v", err)
	}
	if v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("GET through the client lent before Redis answered: %q, %v", v, err)
	}
	if v, err := s2.Client().Do(ctx, s2.Client().B().Get().Key(key).Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("GET through the second store's client: %q, %v; want what the first one set", v, err)
	}
	// A command built before, sent now, is answered: by Redis, or on a
	// Cluster, whose routing needs the slot the builder of a client not
	// made yet could not check, by an error (not a panic).
	switch err := rc.Do(ctx, early).Error(); {
	case s.Mode() == Cluster && (err == nil || !strings.Contains(err.Error(), "build it again")):
		t.Errorf("a command built before the Cluster answered, sent after: %v; want an error asking to build it again", err)
	case s.Mode() != Cluster && !rueidis.IsRedisNil(err):
		t.Errorf("a command built before Redis answered, sent after: %v; want Redis' nil", err)
	}

	// The store's own machinery works: the slot map of a Cluster, the
	// eviction check, and the logs say what happened.
	waitFor(t, "the eviction check and the slot map", 10*time.Second, func() bool {
		if e := s.Eviction(); e.Checked.IsZero() || e.Err != nil {
			return false
		}
		return s.replies == nil || !s.replies.cluster || s.replies.slots.Load() != nil
	})
	if s.replies != nil && s.replies.cluster {
		if _, ok := s.LastReply([]limiter.Hit{{Rule: open, Key: "counted", Cost: 1}}); !ok {
			t.Error("no progress known for the counter's node once the Cluster answered")
		}
	}
	t.Logf("log:\n%s", logs.String())
	if n := strings.Count(logs.String(), `msg="redisstore: Redis does not answer yet`); n != 1 {
		t.Errorf("%d warnings that Redis does not answer yet, want 1; log:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=INFO msg=\"redisstore: Redis answers") {
		t.Errorf("no notice that Redis answers; log:\n%s", logs.String())
	}
}

// TestCloseWhileConnecting: closing a store whose Cluster or sentinels
// never answered returns at once, even while an attempt to connect waits
// on a server that accepts and says nothing, and leaves no goroutine
// trying again.
func TestCloseWhileConnecting(t *testing.T) {
	for _, scheme := range []string{"cluster", "sentinel"} {
		t.Run(scheme, func(t *testing.T) {
			p1, err := redistest.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			p2, err := redistest.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			a1, a2 := "127.0.0.1:"+strconv.Itoa(p1), "127.0.0.1:"+strconv.Itoa(p2)
			url := "redis+cluster://" + a1 + "," + a2
			if scheme == "sentinel" {
				url = "redis+sentinel://" + a1 + "," + a2 + "/fgmaster"
			}
			// A dial's and a handshake's own deadlines far past the
			// bound on Close below: only ending the attempt's dials
			// makes Close return within it.
			s, err := New(Options{URL: url, Prefix: uniquePrefix(t), DialTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("New with nothing listening: %v", err)
			}
			// A server that accepts and never answers: the next
			// attempt waits on it.
			ln, err := net.Listen("tcp", a1)
			if err != nil {
				s.Close()
				t.Fatalf("a free port taken meanwhile: %v", err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 16)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						close(accepted)
						return
					}
					accepted <- c
				}
			}()
			var held net.Conn
			select {
			case held = <-accepted:
			case <-time.After(10 * time.Second):
				s.Close()
				t.Fatal("no attempt to connect within 10 s")
			}
			defer held.Close()
			start := time.Now()
			s.Close()
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Close took %v while connecting; want at once (not the handshake's 30 s)", took)
			}
			// The attempt's connection is closed.
			held.SetReadDeadline(time.Now().Add(5 * time.Second))
			var rerr error
			for buf := make([]byte, 512); rerr == nil; {
				_, rerr = held.Read(buf) // the handshake's command, then the end
			}
			if ne, ok := rerr.(net.Error); ok && ne.Timeout() {
				t.Error("the connection of the attempt under way is still open after Close")
			}
			waitFor(t, "no goroutine trying to connect", 2*time.Second, func() bool {
				return !strings.Contains(allStacks(), "redisstore.(*lazyClient)")
			})
			if err := s.Client().Do(context.Background(), s.Client().B().Ping().Build()).Error(); err == nil {
				t.Error("the client of a closed store answered")
			}
		})
	}
}

// each calls fn for every node at once and waits for them.
func each(nodes []*redistest.Server, fn func(*redistest.Server)) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); fn(n) }()
	}
	wg.Wait()
}

// waitFor fails the test when cond is not true within d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allStacks returns the stacks of every goroutine.
func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
