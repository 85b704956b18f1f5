package edge

import (
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// A kept-alive connection waiting for its next request holds, on fasthttp,
// the goroutine that served it (its stack grown by the request path) and,
// since request bodies stream, its 64 KiB read buffer and request context.
// A connection idle for a while is parked instead: fasthttp is told that
// it ended (it gives its buffers back and its goroutine serves others).
// The connection, plain or TLS, then waits in the parker's idle set (on
// Linux: an epoll set, idle_linux.go) with no goroutine of its own; where
// the set cannot hold it, on a fresh goroutine with a small stack. When
// the next request's first bytes come, a goroutine reads them
// into the connection's own 512-byte buffer and hands the connection back
// to fasthttp as a new one. A connection is never parked in the middle of
// a request: only in the wait that fasthttp starts with its idle deadline
// once an answer is written. The front (front.go) waits for a next request
// through the same read and lets a connection go to be parked the same
// way; a connection that comes back goes to the front.

// What parked connections gave back (fasthttp's 64 KiB read buffers and
// request contexts, in its pools, and the stacks of its goroutines, which
// end after ten to twenty seconds idle) is garbage only after two
// collections, and a server that holds idle connections allocates too
// little to start one: with Options.ReturnMemory, once at least
// collectAfterParks connections were parked and none for collectSettle,
// the parker collects and returns the memory to the system, at most once
// every collectEvery.
const (
	collectAfterParks = 1024
	collectSettle     = 25 * time.Second
	collectEvery      = time.Minute
)

// collectNow reports whether the parker should collect now: parked
// connections were parked since the last collection, the last of them
// sinceLast ago, and the last collection was sinceCollect ago (negative:
// none yet).
func collectNow(parked int, sinceLast, sinceCollect time.Duration) bool {
	return parked >= collectAfterParks && sinceLast >= collectSettle &&
		(sinceCollect < 0 || sinceCollect >= collectEvery)
}

// Idle states of a conn (conn.idle): 0 is busy (or not in the wait for a
// next request), a positive value the parker's tick at which the wait
// began, parking that the parker asked the connection to leave fasthttp.
const parking = -1

// parker parks the engine's idle connections.
type parker struct {
	e     *Engine
	every time.Duration
	tick  atomic.Int64 // counts the sweeps, from 1
	// now is monoNow at the last sweep: a clock at most every behind, for
	// the write bounds of connections (conn.boundWrite), read for free;
	// 0 while the sweeps do not run (before Serve, and from Shutdown on,
	// when answers in flight may still be written for a long time).
	now atomic.Int64
	// returnMemory: collect and return memory after many parks
	// (Options.ReturnMemory).
	returnMemory bool

	mu    sync.Mutex // guards conns, set, noSet and closing
	conns map[*conn]struct{}
	// set holds parked connections without a goroutine each (nil until
	// the first is parked; noSet: it could not be opened). closing
	// says Shutdown closed the parked connections: one parked after that
	// is closed at once.
	set     *idleSet
	noSet   bool
	closing bool

	// parked counts the connections parked now (conn.parkedOut).
	parked atomic.Int64
}

func newParker(e *Engine, every time.Duration) *parker {
	p := &parker{e: e, every: every, conns: map[*conn]struct{}{}}
	p.tick.Store(1)
	return p
}

// add tracks c, a connection served by fasthttp.
func (p *parker) add(c *conn) {
	c.p = p
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

// unpark notes that c is no longer parked (back with fasthttp, or closed).
func (p *parker) unpark(c *conn) {
	if c.parkedOut.CompareAndSwap(true, false) {
		p.parked.Add(-1)
	}
}

// remove forgets c, which is closed.
func (p *parker) remove(c *conn) {
	p.unpark(c)
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// sweep parks, every p.every until done is closed, the connections that
// have waited for their next request since the sweep before.
func (p *parker) sweep(done <-chan struct{}) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	p.now.Store(monoNow())
	defer p.now.Store(0) // the clock stops with the sweeps
	var idle []*conn
	parked := 0 // since the last collection
	var lastPark, lastCollect time.Time
	for {
		var now time.Time
		select {
		case <-done:
			return
		case now = <-t.C:
		}
		p.now.Store(monoNow())
		if len(idle) > 0 {
			parked += len(idle)
			lastPark = now
		}
		sinceCollect := time.Duration(-1)
		if !lastCollect.IsZero() {
			sinceCollect = now.Sub(lastCollect)
		}
		if p.returnMemory && collectNow(parked, now.Sub(lastPark), sinceCollect) {
			runtime.GC() // the pools' buffers move to their victim caches
			debug.FreeOSMemory()
			parked, lastCollect = 0, time.Now()
		}
		p.mu.Lock()
		set := p.set
		p.mu.Unlock()
		if set != nil {
			set.expireDue(now)
		}
		tick := p.tick.Add(1)
		idle = idle[:0]
		p.mu.Lock()
		for c := range p.conns {
			if s := c.idle.Load(); s > 0 && s <= tick-2 {
				idle = append(idle, c)
			}
		}
		p.mu.Unlock()
		for _, c := range idle {
			c.askToPark()
		}
		clear(idle) // their count is kept: len(idle) at the next tick
	}
}

// closeParked closes the connections that are parked (Shutdown), and
// those parked from now on as they come.
func (p *parker) closeParked() {
	p.mu.Lock()
	p.closing = true
	set := p.set
	p.mu.Unlock()
	if set != nil {
		for _, c := range set.closeAll() {
			_ = c.Close()
		}
	}
	p.mu.Lock()
	var parked []*conn
	for c := range p.conns {
		if c.parkedOut.Load() {
			parked = append(parked, c)
		}
	}
	p.mu.Unlock()
	for _, c := range parked {
		_ = c.Close()
	}
}

// askToPark cuts the wait of c for its next request, if c still waits,
// so that its read leaves fasthttp (readIdle).
func (c *conn) askToPark() {
	c.parkMu.Lock()
	defer c.parkMu.Unlock()
	if s := c.idle.Load(); s > 0 && c.idle.CompareAndSwap(s, parking) {
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
	}
}

// readIdle is the read that waits for the next request of a kept-alive
// connection: as Read, except that when the parker asks for the
// connection meanwhile, it reports the end of the connection to fasthttp
// (keeping what it read) and the connection is parked when fasthttp
// closes it.
func (c *conn) readIdle(b []byte) (int, error) {
	into := b
	if len(b) < sniffBytes {
		into = c.headBuf()
	}
	t := c.p.tick.Load()
	c.idle.Store(t)
	for {
		n, err := c.Conn.Read(into)
		if !c.idle.CompareAndSwap(t, 0) {
			return c.leave(into[:n])
		}
		if n == 0 && err != nil && isTimeout(err) && (c.want.IsZero() || time.Now().Before(c.want)) {
			// The connection's own deadline passed before the one asked
			// for: wait on, unless the parker asks for it meanwhile.
			c.parkMu.Lock()
			if !c.idle.CompareAndSwap(0, t) {
				c.parkMu.Unlock()
				return c.leave(nil)
			}
			c.set = c.want
			err = c.Conn.SetReadDeadline(c.want)
			c.parkMu.Unlock()
			if err != nil {
				c.idle.Store(0)
				return 0, err
			}
			continue
		}
		if n > 0 && len(into) != len(b) {
			m := copy(b, into[:n])
			c.pre = into[m:n]
			return m, nil
		}
		return n, err
	}
}

// leave ends the connection for fasthttp, to be parked: read, what the
// wait read meanwhile, is read first once it is back.
func (c *conn) leave(read []byte) (int, error) {
	c.parkMu.Lock() // the parker has moved the deadline
	c.parkMu.Unlock()
	c.idle.Store(0)
	if len(read) > 0 {
		c.pre = append([]byte(nil), read...)
	}
	c.set = c.want
	_ = c.Conn.SetReadDeadline(c.want)
	if c.parkedOut.CompareAndSwap(false, true) {
		c.p.parked.Add(1)
	}
	c.parkNext.Store(true)
	return 0, io.EOF
}

// park waits for the next request of c (or the end of its idle time) in
// the idle set, or on a goroutine of its own where the set cannot hold c,
// then hands c back to the engine.
func (p *parker) park(c *conn) {
	p.mu.Lock()
	closing := p.closing
	if p.set == nil && !p.noSet && !closing {
		s, err := newIdleSet(p.resume, p.expire)
		if err != nil {
			p.noSet = true
			p.e.log.Debug("gateway: edge: parked connections wait on goroutines", "reason", err)
		}
		p.set = s
	}
	set := p.set
	p.mu.Unlock()
	if closing {
		_ = c.Close()
		return
	}
	if len(c.pre) == 0 && set != nil && set.hold(c) {
		return
	}
	p.resume(c)
}

// expire closes c, parked, whose idle time ended.
func (p *parker) expire(c *conn) { _ = c.Close() }

// resume reads the first bytes of the next request of c, parked, unless
// they were read already (waiting for them, or the end of its idle time),
// then hands c back to the engine (the front, or fasthttp).
func (p *parker) resume(c *conn) {
	if len(c.pre) == 0 {
		n, err := c.read(c.headBuf())
		if n == 0 {
			_ = err // the idle time ended, or the client left
			_ = c.Close()
			return
		}
		c.pre = c.head[:n]
	}
	p.unpark(c)
	// fasthttp takes it as a new connection, whose head the engine bounds
	// (conn.headRead): from now, as its first bytes are in.
	c.headNext = false
	_ = c.SetReadDeadline(time.Now().Add(p.e.header))
	p.e.enter(c)
}
