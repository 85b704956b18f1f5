package redisstore

import (
	"context"

	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// trickle is a loopback TCP proxy in front of a Redis server that passes
// the server's replies on a few bytes at a time: replies keep arriving,
// but a call waits behind the replies ahead of it for much longer than it
// takes Redis to answer, as it does in a process that waits for CPU. What
// the client sends passes at once.
type trickle struct {
	ln    net.Listener
	to    string
	chunk int
	every time.Duration
	wg    sync.WaitGroup
	mu    sync.Mutex // guards conns
	conns []net.Conn
}

func startTrickle(t *testing.T, to string, chunk int, every time.Duration) *trickle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &trickle{ln: ln, to: to, chunk: chunk, every: every}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *trickle) addr() string { return p.ln.Addr().String() }

func (p *trickle) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.to, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
		go func() {
			defer p.wg.Done()
			defer c.Close()
			buf := make([]byte, p.chunk)
			tick := time.NewTicker(p.every)
			defer tick.Stop()
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
					<-tick.C
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *trickle) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestSlowRepliesThatFlowAreNotDegraded: a healthy Redis whose replies
// reach the store slowly but steadily (through a proxy that passes 32
// bytes every 5 ms, about one decision's answer) keeps deciding: calls
// that wait several deadlines behind the replies ahead of them are
// answered by Redis, none is decided by policy, and the breaker stays
// closed. The engine judges Redis by its progress, not by how long a call
// took.
func TestSlowRepliesThatFlowAreNotDegraded(t *testing.T) {
	srv := sharedServer(t)
	p := startTrickle(t, srv.Addr, 32, 5*time.Millisecond)
	// One script call per decision, so that each waits behind the others'
	// answers.
	s, err := New(Options{URL: "redis://" + p.addr(), Prefix: uniquePrefix(t), MaxBatch: 1, EvictionCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const timeout = 150 * time.Millisecond
	lim := limiter.New(s, limiter.Options{Timeout: timeout})
	r := ruletest.With(t, floodgate.Limit{Name: "slow", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	var slowest atomic.Int64
	var degraded, decided atomic.Int64
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Go(func() {
			hits := []limiter.Hit{{Rule: r, Key: "k" + string(rune('a'+w%8)), Cost: 1}}
			for range 8 {
				start := time.Now()
				res, err := lim.Check(context.Background(), hits)
				took := int64(time.Since(start))
				for v := slowest.Load(); took > v && !slowest.CompareAndSwap(v, took); v = slowest.Load() {
				}
				decided.Add(1)
				if err != nil || res.Degraded != limiter.NotDegraded || !res.Allowed {
					degraded.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := lim.Stats()
	t.Logf("%d decisions, slowest %v, deadline %v; %+v", decided.Load(), time.Duration(slowest.Load()), timeout, st)
	if time.Duration(slowest.Load()) <= timeout {
		t.Fatalf("no decision outlasted the %v deadline (slowest %v): the proxy did not slow Redis down", timeout, time.Duration(slowest.Load()))
	}
	if degraded.Load() != 0 || st.Degraded != 0 || st.BreakerOpens != 0 || st.StoreFailures != 0 {
		t.Fatalf("%d of %d decisions degraded, %d store failures, breaker opened %d times; want none: Redis answered all along",
			degraded.Load(), decided.Load(), st.StoreFailures, st.BreakerOpens)
	}
}

// TestPausedRedisFailsWithinTheDeadline: a SIGSTOPped Redis fails every
// call by its deadline, far within the hard timeout, for a lone caller on
// fresh connections as for a loaded store, and the breaker opens; over
// TCP and over a Unix socket alike.
func TestPausedRedisFailsWithinTheDeadline(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		srv := redistest.Start(t)
		testPausedRedisFailsWithinTheDeadline(t, srv, "redis://"+srv.Addr)
	})
	t.Run("unix", func(t *testing.T) {
		srv, sock := redistest.StartUnix(t)
		testPausedRedisFailsWithinTheDeadline(t, srv, "redis+unix://"+sock)
	})
}

func testPausedRedisFailsWithinTheDeadline(t *testing.T, srv *redistest.Server, url string) {
	s, err := New(Options{URL: url, Prefix: uniquePrefix(t), EvictionCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const timeout = 100 * time.Millisecond
	lim := limiter.New(s, limiter.Options{Timeout: timeout})
	r := ruletest.With(t, floodgate.Limit{Name: "paused", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	srv.Pause()
	defer srv.Resume()
	// A lone caller: the client's first call on its connection.
	start := time.Now()
	res, err := lim.Check(context.Background(), []limiter.Hit{{Rule: r, Key: "lone", Cost: 1}})
	lone := time.Since(start)
	if err != nil || res.Allowed || res.Degraded != limiter.DegradedDeadline || lone >= limiter.DefaultHardTimeout/2 {
		t.Fatalf("lone call on a stopped Redis: %+v, %v after %v; want denied by policy at the %v deadline", res, err, lone, timeout)
	}
	// Many callers.
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			hits := []limiter.Hit{{Rule: r, Key: "k" + string(rune('a'+w)), Cost: 1}}
			for {
				start := time.Now()
				res, err := lim.Check(context.Background(), hits)
				took := int64(time.Since(start))
				for v := slowest.Load(); took > v && !slowest.CompareAndSwap(v, took); v = slowest.Load() {
				}
				if err != nil || res.Allowed || res.Degraded == limiter.NotDegraded {
					t.Errorf("stopped Redis: %+v, %v; want denied by policy", res, err)
					return
				}
				if res.Degraded == limiter.DegradedBreakerOpen {
					return
				}
			}
		})
	}
	wg.Wait()
	st := lim.Stats()
	t.Logf("lone call %v; slowest of the loaded calls %v (deadline %v, hard timeout %v); %+v",
		lone, time.Duration(slowest.Load()), timeout, limiter.DefaultHardTimeout, st)
	if time.Duration(slowest.Load()) >= limiter.DefaultHardTimeout/2 {
		t.Fatalf("slowest decision %v on a stopped Redis, want well within the hard timeout %v", time.Duration(slowest.Load()), limiter.DefaultHardTimeout)
	}
	// A call's silence counts from when its command was written (the
	// progress rule), so one whose command went out a moment after it
	// began may be given that moment (SlowCalls), never more: the slowest
	// call above is held to half the hard timeout, and none reaches it.
	if !st.BreakerOpen || st.HardTimeouts != 0 {
		t.Fatalf("%+v; want the breaker open and no call held to the hard timeout", st)
	}
}

// TestClusterFollowsFailover: a Cluster primary is SIGSTOPped. Until its
// replica takes over, decisions on its slots are decided by policy by the
// deadline while the other primaries keep answering theirs; once the
// replica has won the election, the store sends the slots there within
// 2 s, measured from the last moment the replica was seen a replica to
// the end of the first decision Redis answered on them (it reads the slot
// map while a node is silent, and drops its connections to a node whose
// slots moved, so that the client reads the new topology at once instead
// of at its next periodic refresh, 10 s).
func TestClusterFollowsFailover(t *testing.T) {
	// Without full coverage, the other primaries answer while the stopped
	// one is marked failed and before its replica takes over (with it,
	// every node refuses commands then, CLUSTERDOWN).
	c := redistest.StartClusterWith(t, redistest.ClusterConfig{Replicas: 1,
		Args: []string{"--cluster-require-full-coverage", "no"}})
	primaries, err := c.Primaries()
	if err != nil {
		t.Fatal(err)
	}
	url := "redis+cluster://" + primaries[0].Addr + "," + primaries[1].Addr + "," + primaries[2].Addr
	s, err := New(Options{URL: url, Prefix: uniquePrefix(t), EvictionCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The default deadline: a shorter one takes a primary that a loaded
	// machine starves of CPU for a moment (seven redis-servers share the
	// cores here) for a stopped one, which is what the default is chosen
	// against.
	lim := limiter.New(s, limiter.Options{Timeout: limiter.DefaultTimeout})
	r := ruletest.With(t, floodgate.Limit{Name: "failover", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	// A subject on the primary to stop, and one elsewhere.
	victim, err := c.PrimaryOf(int(slot(s.Key(r, "s0"))))
	if err != nil {
		t.Fatal(err)
	}
	onVictim, elsewhere := "s0", ""
	for i := 1; elsewhere == ""; i++ {
		key := "s" + itoa(int64(i))
		if node, err := c.PrimaryOf(int(slot(s.Key(r, key)))); err != nil {
			t.Fatal(err)
		} else if node != victim {
			elsewhere = key
		}
	}
	replica, err := c.ReplicaOf(victim)
	if err != nil || replica == nil {
		t.Fatalf("no replica of %s: %v", victim.Addr, err)
	}

	// Load on both subjects; each decision is recorded with its start.
	type decision struct {
		start, end time.Time
		degraded   bool
		why        limiter.Degradation
		err        error
	}
	var mu sync.Mutex
	got := map[string][]decision{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		key := onVictim
		if w%2 == 1 {
			key = elsewhere
		}
		wg.Go(func() {
			hits := []limiter.Hit{{Rule: r, Key: key, Cost: 1}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				res, err := lim.Check(context.Background(), hits)
				d := decision{start: start, end: time.Now(), degraded: err != nil || res.Degraded != limiter.NotDegraded, why: res.Degraded, err: err}
				mu.Lock()
				got[key] = append(got[key], d)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	waitUntil := func(what string, limit time.Duration, cond func() bool) time.Time {
		t.Helper()
		for deadline := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
			if cond() {
				return time.Now()
			}
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("waited %v for %s", limit, what)
			}
		}
	}
	count := func(key string) int { mu.Lock(); defer mu.Unlock(); return len(got[key]) }
	waitUntil("decisions on both subjects", 30*time.Second, func() bool { return count(onVictim) >= 20 && count(elsewhere) >= 20 })
	paused := time.Now()
	victim.Pause()
	defer victim.Resume()
	// The replica won the election after the last poll that found it a
	// replica began: the time the store took to follow is measured from
	// there, so that it is never measured short.
	var promoted time.Time
	waitUntil("the replica to take over", 60*time.Second, func() bool {
		asked := time.Now()
		role, err := redistest.Role(replica)
		if err != nil || role != "master" {
			promoted = asked
			return false
		}
		return true
	})
	var followed time.Time
	waitUntil("a decision on the moved slots by Redis", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range got[onVictim] {
			if d.start.After(promoted) && !d.degraded {
				followed = d.end
				return true
			}
		}
		return false
	})
	close(stop)
	wg.Wait()

	var slowest time.Duration
	degradedVictim, degradedElsewhere := 0, 0
	mu.Lock()
	for _, d := range got[onVictim] {
		if d.start.After(paused) && d.start.Before(promoted) {
			slowest = max(slowest, d.end.Sub(d.start))
			if d.degraded {
				degradedVictim++
			}
		}
	}
	for _, d := range got[elsewhere] {
		if d.degraded {
			if degradedElsewhere < 3 {
				t.Logf("on a healthy primary, %v after SIGSTOP: degraded (%v, %v) after %v", d.start.Sub(paused), d.why, d.err, d.end.Sub(d.start))
			}
			degradedElsewhere++
		}
	}
	mu.Unlock()
	follow := followed.Sub(promoted)
	t.Logf("replica took over %v after SIGSTOP; the store followed %v after that; while stopped: %d decisions on it degraded, slowest %v; elsewhere %d degraded; %+v",
		promoted.Sub(paused), follow, degradedVictim, slowest, degradedElsewhere, lim.Stats())
	if degradedVictim == 0 || slowest >= limiter.DefaultHardTimeout/2 {
		t.Fatalf("decisions on the stopped primary: %d degraded, slowest %v; want them decided by policy within the deadline", degradedVictim, slowest)
	}
	if degradedElsewhere != 0 {
		t.Fatalf("%d decisions on a healthy primary degraded; want none", degradedElsewhere)
	}
	// The client's own refresh comes every 10 s; the store follows at
	// its next read of the slot map (250 ms) plus the client's refresh
	// delay (a random wait under 1 s), within the 2 s that issue 26 asks.
	if follow > 2*time.Second {
		t.Fatalf("the store followed the new primary %v after the election, want within 2 s", follow)
	}
}

// TestSilentServerOwesReplies: a server is silent only while it owes
// replies. With nothing written, or with every command answered, it is
// not (a call still waiting waits in this process); with a command
// unanswered (a stopped server) it is, since it was asked (the write that
// made the connection owe a reply) or its last reply, whichever is later;
// and an answer waiting unread in the receive buffer, because the
// goroutine that reads the connection has not run, counts as an answer.
func TestSilentServerOwesReplies(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux tells what waits unread")
	}
	srv := redistest.Start(t)
	rp := newReplies(Address{Mode: Standalone})
	c, err := rp.dial(context.Background(), srv.Addr, &net.Dialer{Timeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*trackedConn)
	now := time.Now()
	if last := rp.all.replied(now); !last.Equal(now) {
		t.Fatalf("nothing written: last reply %v, want now (nothing owed)", last)
	}
	srv.Pause()
	asking := time.Now()
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	if !tc.owes() || unread(tc.raw) {
		t.Fatalf("a PING to a stopped server: owes %v, unread %v; want owed, nothing unread", tc.owes(), unread(tc.raw))
	}
	if last := rp.all.replied(asked.Add(time.Hour)); last.Before(asking) || last.After(asked) {
		t.Fatalf("a stopped server owes a reply, no reply ever: silent since %v, want since it was asked (%v to %v)", last, asking, asked)
	}
	srv.Resume()
	before := time.Now()
	for deadline := time.Now().Add(10 * time.Second); !unread(tc.raw); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no reply arrived within 10s")
		}
	}
	if last := rp.all.replied(time.Now()); last.Before(before) {
		t.Fatalf("a reply waits unread: last reply %v, want after %v", last, before)
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if read := rp.all.lastReply(); read.Before(before) || tc.owes() {
		t.Fatalf("after the read: last reply %v (want after %v), owes %v (want not)", read, before, tc.owes())
	}
	later := time.Now().Add(time.Hour)
	if last := rp.all.replied(later); !last.Equal(later) {
		t.Fatalf("an hour on with nothing owed: %v, want that instant", last)
	}
}

// TestConnCountsFollowTheStream: on the store's own connections, with the
// client's handshake, scripts loaded and run, errors, the eviction check
// and a Cluster's slot map, every command written is matched by a reply
// read once the store is quiet, and the counts never lose the stream.
func TestConnCountsFollowTheStream(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			lim := limiter.New(s, limiter.Options{})
			r := ruletest.With(t, floodgate.Limit{Name: "count", Algorithm: floodgate.SlidingLog, Max: 5, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := range 20 {
						hits := []limiter.Hit{{Rule: r, Key: "k" + itoa(int64(w*20+i%3)), Cost: 1}}
						if _, err := lim.Check(context.Background(), hits); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			if _, err := s.ServerUsage(context.Background()); err != nil {
				t.Fatal(err)
			}
			s.CheckEviction(context.Background())
			servers := []*server{&s.replies.all}
			if mode == "cluster" {
				s.replies.readSlots()
				servers = nil
				s.replies.mu.Lock()
				for _, v := range s.replies.nodes {
					servers = append(servers, v)
				}
				s.replies.mu.Unlock()
			}
			// A connection counts a command once its Write returns, and
			// the reply may be read (and its caller answered) before that:
			// a writer goroutine that has not run since may still owe its
			// count, for a moment.
			settled := func(c *trackedConn) bool {
				return !c.lost.Load() && c.commands.Load() != 0 && c.commands.Load() == c.replies.Load()
			}
			conns := 0
			for _, v := range servers {
				v.mu.Lock()
				var cs []*trackedConn
				for c := range v.conns {
					cs = append(cs, c)
				}
				v.mu.Unlock()
				for _, c := range cs {
					conns++
					for deadline := time.Now().Add(time.Second); !settled(c) && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
					if !settled(c) {
						t.Errorf("%s: lost %v, %d commands, %d replies; want as many replies as commands",
							c.RemoteAddr(), c.lost.Load(), c.commands.Load(), c.replies.Load())
					}
				}
			}
			if conns == 0 {
				t.Fatal("no tracked connection")
			}
		})
	}
}
