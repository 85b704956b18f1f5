package redisstore

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// movingAddr is one address in front of a Redis that can move, as a DNS
// name or a virtual IP moves to the new primary after a failover: each new
// connection is forwarded to the server it names at the time, and the
// connections made before stay with the server they reached.
type movingAddr struct {
	ln net.Listener
	mu sync.Mutex // guards to
	to string
}

func startMovingAddr(t *testing.T, to string) *movingAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &movingAddr{ln: ln, to: to}
	var wg sync.WaitGroup
	var cmu sync.Mutex // guards conns
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.mu.Lock()
			to := m.to
			m.mu.Unlock()
			s, err := net.DialTimeout("tcp", to, time.Second)
			if err != nil {
				c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, s)
			cmu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return m
}

func (m *movingAddr) addr() string { return m.ln.Addr().String() }

// move sends the connections made from now on to the server at to.
func (m *movingAddr) move(to string) {
	m.mu.Lock()
	m.to = to
	m.mu.Unlock()
}

// replicate makes replica a replica of primary and waits until it holds
// everything primary has written.
func replicate(t *testing.T, replica, primary *redistest.Server) {
	t.Helper()
	host, port, _ := strings.Cut(primary.Addr, ":")
	if _, err := replica.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica to catch up", 10*time.Second, func() bool {
		p, err1 := primary.Do("INFO", "replication")
		r, err2 := replica.Do("INFO", "replication")
		return err1 == nil && err2 == nil && strings.Contains(r, "master_link_status:up") &&
			infoField(p, "master_repl_offset") == infoField(r, "master_repl_offset")
	})
}

// infoField returns the value of field in an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// TestFailoverBehindOneAddress: a standalone store whose address moves to
// a replica promoted in its primary's place (a managed Redis' primary
// endpoint, a DNS name or a virtual IP), while the old primary becomes a
// replica of the new one. Redis keeps the connections made to the old
// primary open and answers each script call there READONLY. The store
// kept its connection to the old primary, so every decision from the
// failover on was decided by its limit's failure policy (the breaker open,
// each probe answered READONLY again) until the process restarted. It now
// closes the connections an answer READONLY came on and sends the call
// again on a new one, which reaches the new primary: no decision is
// degraded, and the counts made before the failover (replicated) go on.
func TestFailoverBehindOneAddress(t *testing.T) {
	// A replica's first sync starts at once, not after diskless sync's
	// default wait of 5 s.
	a, b := startRedis(t, "--repl-diskless-sync-delay", "0"), startRedis(t, "--repl-diskless-sync-delay", "0")
	replicate(t, b, a)
	front := startMovingAddr(t, a.Addr)
	var logs syncBuffer
	s, err := New(Options{URL: "redis://" + front.addr(), Prefix: uniquePrefix(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	avoidHourBoundary()
	const max = 60
	rule := ruletest.With(t, floodgate.Limit{Name: "failover", Algorithm: floodgate.FixedWindow, Max: max, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	// A long deadline: the test is about READONLY, not about a loaded
	// machine's stalls.
	lim := limiter.New(s, limiter.Options{Timeout: 2 * time.Second})
	decide := func(n int) (allowed, degraded int) {
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := lim.Check(ctx, []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}})
			cancel()
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if res.Degraded != limiter.NotDegraded {
				degraded++
			} else if res.Allowed {
				allowed++
			}
		}
		return allowed, degraded
	}
	if allowed, degraded := decide(20); allowed != 20 || degraded != 0 {
		t.Fatalf("before the failover: %d of 20 allowed, %d degraded; want 20, 0", allowed, degraded)
	}
	replicate(t, b, a) // b holds the 20 charges

	// The failover: b is the primary, a its replica, the address b's.
	if _, err := b.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(b.Addr, ":")
	if _, err := a.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	front.move(b.Addr)

	allowed, degraded := decide(50)
	t.Logf("after the failover: %d allowed, %d degraded of 50; breaker open %v", allowed, degraded, lim.Stats().BreakerOpen)
	if degraded != 0 || allowed != max-20 {
		t.Fatalf("after the failover: %d of 50 degraded, %d allowed; want 0 degraded and %d allowed (the limit of %d less the 20 counted before); log:\n%s",
			degraded, allowed, max-20, max, logs.String())
	}
	if !strings.Contains(logs.String(), "READONLY") {
		t.Errorf("no warning names the READONLY answer; log:\n%s", logs.String())
	}
}
