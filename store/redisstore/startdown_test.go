package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/redis/rueidis"
)

// TestStartsWhileRedisIsDown: a store opened while its standalone Redis
// does not answer starts all the same (a gateway restarted during an
// outage serves by its limits' failure policies instead of not at all),
// its decisions follow the failure policy, and once Redis is back they
// are Redis': the limit counts there. The store refused to open before,
// so the process that made it could not start until Redis came back.
func TestStartsWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop() // its port is known and nothing listens there
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t), DialTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("New with Redis down: %v; want a store that decides by policy until Redis answers", err)
	}
	defer s.Close()
	rule := ruletest.With(t, floodgate.Limit{Name: "down", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 2},
		limiter.RuleOptions{OnFailure: floodgate.FailOpen})
	lim := limiter.New(s, limiter.Options{Timeout: 200 * time.Millisecond,
		Breaker: limiter.BreakerOptions{Failures: 3, ProbeInterval: 50 * time.Millisecond}})
	decide := func() *limiter.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := new(limiter.Result)
		if err := lim.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}}, r); err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return r
	}
	for i := range 5 {
		if r := decide(); !r.Allowed || r.Degraded == limiter.NotDegraded {
			t.Fatalf("decision %d with Redis down: allowed %v, degraded %v; want allowed by the failure policy", i, r.Allowed, r.Degraded)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Once Redis answers (the breaker probes it), the bucket of 2 is
	// Redis': two allowed, then refused.
	deadline := time.Now().Add(30 * time.Second)
	for decide().Degraded != limiter.NotDegraded {
		if time.Now().After(deadline) {
			t.Fatal("30 s after Redis came back, decisions are still made by the failure policy")
		}
		time.Sleep(20 * time.Millisecond)
	}
	allowed := 1 // the decision that found Redis back
	for range 3 {
		r := decide()
		if r.Degraded != limiter.NotDegraded {
			t.Fatalf("a decision degraded (%v) with Redis back", r.Degraded)
		}
		if r.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("%d of 4 allowed by a bucket of 2 once Redis came back; want 2", allowed)
	}
}

// TestStartRefusedWhereRedisMustAnswer: what New cannot do without Redis
// still stops it, with the reason: a store that must check Redis'
// eviction settings first (RefuseEvictable), on a standalone server, a
// Cluster or sentinels that do not answer; and a deployment that answers
// with an error (a password refused) or whose TLS handshake fails, which
// waiting would not mend.
func TestStartRefusedWhereRedisMustAnswer(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	for name, o := range map[string]Options{
		"RefuseEvictable":          {URL: "redis://" + srv.Addr, RefuseEvictable: true, DialTimeout: 500 * time.Millisecond},
		"Cluster RefuseEvictable":  {URL: "redis+cluster://" + srv.Addr, RefuseEvictable: true, DialTimeout: 500 * time.Millisecond},
		"Sentinel RefuseEvictable": {URL: "redis+sentinel://" + srv.Addr + "/fgmaster", RefuseEvictable: true, DialTimeout: 500 * time.Millisecond},
	} {
		s, err := New(o)
		if err == nil {
			s.Close()
			t.Errorf("%s: opened with Redis down", name)
			continue
		}
		if !strings.Contains(err.Error(), "connect") || errors.Is(err, ErrEvictable) {
			t.Errorf("%s: %v; want the connection's error", name, err)
		}
	}
	cl := sharedCluster(t)
	tlsSrv, _ := startTLSRedis(t) // its certificate is signed by no root New trusts
	for name, o := range map[string]Options{
		"Cluster password refused":  {URL: "redis+cluster://nobody:wrong@" + cl.Addrs()[0]},
		"Sentinel password refused": {URL: "redis+sentinel://" + sharedServer(t).Addr + "/fgmaster", SentinelUsername: "nobody", SentinelPassword: "wrong"},
		"Cluster TLS refused":       {URL: "rediss+cluster://" + tlsSrv.TLSAddr},
		"Sentinel TLS refused":      {URL: "rediss+sentinel://" + tlsSrv.TLSAddr + "/fgmaster"},
	} {
		o.DialTimeout = 2 * time.Second
		s, err := New(o)
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		var re *rueidis.RedisError
		if !strings.Contains(err.Error(), "connect") || strings.Contains(name, "password") != errors.As(err, &re) {
			t.Errorf("%s: %v; want the connection's error", name, err)
		}
	}
}

// holdEveryClient connects to the Redis at addr until it refuses a
// connection for having maxclients already, and returns the connections it
// holds (closed at the test's end).
func holdEveryClient(t *testing.T, addr string) []net.Conn {
	t.Helper()
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	buf := make([]byte, 128)
	for range 1000 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(buf[:n]), "-ERR max number of clients reached") {
			return held
		}
	}
	t.Fatal("Redis took 1,000 connections and refused none")
	return nil
}

// TestStartsWhileRedisIsFull: a store opened while its Redis holds
// maxclients connections already (as when the instances of a rollout
// start before the old ones have left) starts all the same, as it does
// while Redis is down: Redis accepts each connection, says "max number of
// clients reached" and closes it, which is no answer to wait for rather
// than a refusal. Its decisions follow the failure policy, and are Redis'
// once a connection is free. The store refused to open before (connect:
// EOF), so the process could not start while Redis was full.
func TestStartsWhileRedisIsFull(t *testing.T) {
	srv := startRedis(t, "--maxclients", "8")
	held := holdEveryClient(t, srv.Addr)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatalf("New with Redis full: %v; want a store that decides by policy until Redis takes its connection", err)
	}
	defer s.Close()
	rule := ruletest.With(t, floodgate.Limit{Name: "full", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	lim := limiter.New(s, limiter.Options{Timeout: 2 * time.Second, Breaker: limiter.BreakerOptions{ProbeInterval: 50 * time.Millisecond}})
	decide := func() *limiter.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := new(limiter.Result)
		if err := lim.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}}, r); err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return r
	}
	avoidHourBoundary()
	for i := range 5 {
		if r := decide(); r.Allowed || r.Degraded == limiter.NotDegraded {
			t.Fatalf("decision %d with Redis full: allowed %v, degraded %v; want refused by the failure policy", i, r.Allowed, r.Degraded)
		}
	}
	for _, c := range held {
		c.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	r := decide()
	for r.Degraded != limiter.NotDegraded {
		if time.Now().After(deadline) {
			t.Fatal("30 s after Redis had room, decisions are still made by the failure policy")
		}
		time.Sleep(20 * time.Millisecond)
		r = decide()
	}
	allowed := 0
	for ; r.Degraded == limiter.NotDegraded && r.Allowed; r = decide() {
		allowed++
	}
	if allowed != 2 || r.Degraded != limiter.NotDegraded {
		t.Errorf("%d allowed by a window of 2 once Redis had room, then degraded %v; want 2 and Redis' refusal", allowed, r.Degraded)
	}
}
