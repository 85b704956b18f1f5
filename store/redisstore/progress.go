package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/floodgate/floodgate/limiter"
	"github.com/redis/rueidis"
)

// Progress. The engine judges a slow call by whether Redis makes progress
// (limiter.ReplyClock): a call fails at the engine's deadline only when no
// reply at all arrived on its connection for that long. The store learns
// it from its own connections: every connection it dials is wrapped, and a
// read that returns bytes marks the instant its server last answered.
// A server that owes no reply (every command written on its connections
// was answered; the store counts whole RESP values both ways) is not
// silent either, and neither is one whose answer waits unread in a
// connection's receive buffer: then a call still waiting waits in this
// process, which is short of CPU. Standalone and Sentinel
// stores count every connection to Redis (not the sentinels'); a Cluster
// store counts per node, and finds the node of a
// slot in a map of the Cluster's slots that it reads itself (CLUSTER
// SLOTS) when it opens, and again while calls outlast the deadline.
//
// While a node answers nothing, the store also reads the slot map every
// watchEvery, so that when the Cluster has moved the node's slots to a
// replica it closes its connections to the node: the client then reads
// the new topology at once rather than at its next periodic refresh.

const (
	// watchEvery is how often the slot map is read while a Cluster node
	// answers nothing.
	watchEvery = 250 * time.Millisecond
	// watchFor is how long the watch goes on after the last call that
	// outlasted its deadline.
	watchFor = 2 * time.Second
	// silentAfter is how long a node must have been silent for a slow
	// call to start the watch.
	silentAfter = 100 * time.Millisecond
	// staleSlots is the age past which a slow call reads the slot map
	// again.
	staleSlots = 10 * time.Second
	// maxNodes bounds the Cluster nodes whose replies are tracked.
	maxNodes = 4096
	// movedFor is how long after a slot moved a slow call on it is also
	// judged by the node that served it before: the client may still
	// send there until it reads the new topology.
	movedFor = 5 * time.Second
)

// server is when the connections to one server (or every server, outside
// a Cluster) last returned bytes, and which of them are open.
type server struct {
	base time.Time
	last atomic.Int64 // ns after base of the newest read that returned bytes, plus 1; 0: none yet
	// held, when set (in tests), runs in each read that returned bytes
	// before they are recorded: the moment a reply has left the socket
	// and is not yet progress.
	held atomic.Pointer[func([]byte)]
	// writing, when set (in tests), runs before each write: the moment a
	// command waits in this process for the goroutine that writes it.
	writing atomic.Pointer[func([]byte)]

	mu    sync.Mutex // guards conns
	conns map[*trackedConn]struct{}
}

// lastReply returns the instant of the newest read that returned bytes
// (the zero time when none did).
func (v *server) lastReply() time.Time {
	n := v.last.Load()
	if n == 0 {
		return time.Time{}
	}
	return v.base.Add(time.Duration(n - 1))
}

// replied returns the instant the server last answered: its newest read
// that returned bytes, or, when later, the instant the connection that has
// owed replies longest began to owe them (a command written to a
// connection that owed none: the server cannot have answered before it
// was asked, however long it had nothing to answer); or now when it owes
// no reply on any connection (every command written was answered: a call
// still waiting waits in this process, not for the server), or when bytes
// wait unread on one of them (the goroutine that reads it has not run:
// this process is short of CPU, not the server of progress).
func (v *server) replied(now time.Time) time.Time {
	last := v.lastReply()
	v.mu.Lock()
	defer v.mu.Unlock()
	owes := false
	var asked time.Time // when the connection owing replies longest began to
	for c := range v.conns {
		if unread(c.raw) {
			return now
		}
		if c.owes() {
			if at := c.owingSince(); !owes || at.Before(asked) {
				asked = at
			}
			owes = true
		}
	}
	if !owes {
		return now
	}
	if asked.After(last) {
		return asked
	}
	return last
}

// closeAll closes the open connections.
func (v *server) closeAll() int {
	return v.closeDialledBefore(time.Time{})
}

// closeDialledBefore closes the open connections dialled before t (all of
// them when t is zero) and returns how many it closed.
func (v *server) closeDialledBefore(t time.Time) int {
	v.mu.Lock()
	cs := make([]*trackedConn, 0, len(v.conns))
	for c := range v.conns {
		if t.IsZero() || c.dialled.Before(t) {
			cs = append(cs, c)
		}
	}
	v.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	return len(cs)
}

// trackedConn is a connection to Redis that marks its server's progress,
// and counts the commands it wrote and the replies it read (whole RESP
// values), so that it can tell whether the server owes it replies.
type trackedConn struct {
	net.Conn          // what the client reads and writes: the TCP or TLS connection
	raw      net.Conn // the TCP connection beneath
	srv      *server
	dialled  time.Time // when it was connected
	once     sync.Once

	rmu, wmu sync.Mutex // guard in, out
	in, out  respCount
	replies  atomic.Int64
	commands atomic.Int64
	lost     atomic.Bool // a count could not follow the stream
	// owing is when the connection last began to owe replies (a write
	// while it owed none), in ns after its server's base, plus 1; 0:
	// never.
	owing atomic.Int64
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		if h := c.srv.held.Load(); h != nil {
			(*h)(b[:n])
		}
		c.srv.last.Store(int64(time.Since(c.srv.base)) + 1)
		c.rmu.Lock()
		c.replies.Store(c.in.feed(b[:n]))
		lost := c.in.lost
		c.rmu.Unlock()
		if lost {
			c.lost.Store(true)
		}
	}
	return n, err
}

// Write writes b. A plain connection (read and written raw) is written
// through Go's net package while the server owes it no reply (a lone
// caller's command): there, measured, the raw write made each decision
// 8 µs slower, pinned or not (docs/redis.md).
func (c *trackedConn) Write(b []byte) (int, error) {
	if h := c.srv.writing.Load(); h != nil {
		(*h)(b)
	}
	w := c.Conn
	idle := !c.owes()
	if rc, ok := w.(*rawconn.Conn); ok && idle {
		w = rc.PlainConn()
	}
	n, err := w.Write(b)
	if n > 0 {
		if idle {
			// Asked now: it owed nothing until this write.
			c.owing.Store(int64(time.Since(c.srv.base)) + 1)
		}
		c.wmu.Lock()
		c.commands.Store(c.out.feed(b[:n]))
		lost := c.out.lost
		c.wmu.Unlock()
		if lost {
			c.lost.Store(true)
		}
	}
	return n, err
}

// owingSince returns when the connection last began to owe replies (the
// zero time when that cannot be told).
func (c *trackedConn) owingSince() time.Time {
	n := c.owing.Load()
	if n == 0 || c.lost.Load() {
		return time.Time{}
	}
	return c.srv.base.Add(time.Duration(n - 1))
}

// owes reports whether the server has not answered every command written,
// or whether that cannot be told.
func (c *trackedConn) owes() bool {
	// Replies first: a reply read after the commands were loaded could
	// make a command answered since look unanswered, never the reverse.
	r := c.replies.Load()
	return c.lost.Load() || c.commands.Load() > r
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
	})
	return c.Conn.Close()
}

// slotMap is which Cluster node serves each slot, as the store last read
// it.
type slotMap struct {
	read  time.Time
	owner [16384]uint16 // 1 + the index in addrs; 0: no node
	addrs []string
	// prev is the map before the last change of owners, at changed
	// (nil: none yet); its own prev is dropped.
	prev    *slotMap
	changed time.Time
}

// node returns the address of the node that serves sl ("": none).
func (m *slotMap) node(sl uint16) string {
	if o := m.owner[sl]; o != 0 {
		return m.addrs[o-1]
	}
	return ""
}

// sameOwners reports whether m and o name the same node for every slot.
func (m *slotMap) sameOwners(o *slotMap) bool {
	for sl := range m.owner {
		if m.node(uint16(sl)) != o.node(uint16(sl)) {
			return false
		}
	}
	return true
}

// replies keeps the store's progress: per server, and a Cluster's slots.
type replies struct {
	cluster  bool
	network  string // what the store dials: "tcp", or "unix" (redis+unix)
	base     time.Time
	sentinel *net.Resolver // marks the dialer of the sentinels' connections
	log      *slog.Logger

	all server // every connection to Redis, outside a Cluster

	mu    sync.Mutex // guards nodes
	nodes map[string]*server

	slots    atomic.Pointer[slotMap]
	client   rueidis.Client // set once the client exists
	asked    atomic.Int64   // ns after base of the last slow call
	watching atomic.Bool
	stop     chan struct{}
	watchers sync.WaitGroup
	follows  atomic.Int64 // nodes whose connections were closed after their slots moved
}

func newReplies(a Address) *replies {
	mode := a.Mode
	r := &replies{cluster: mode == Cluster, network: "tcp", base: time.Now(), stop: make(chan struct{})}
	if a.Unix {
		r.network = "unix"
	}
	r.all.base, r.all.conns = r.base, map[*trackedConn]struct{}{}
	if mode == Sentinel {
		r.sentinel = &net.Resolver{} // the default resolver, by another pointer
	}
	if r.cluster {
		r.nodes = map[string]*server{}
	}
	return r
}

// server returns the progress of the server at addr, or nil when it is
// not tracked.
func (r *replies) server(addr string, add bool) *server {
	if !r.cluster {
		return &r.all
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.nodes[addr]
	if v == nil && add && len(r.nodes) < maxNodes {
		v = &server{base: r.base, conns: map[*trackedConn]struct{}{}}
		r.nodes[addr] = v
	}
	return v
}

// dial connects to dst as the client would, and tracks the connection
// unless it is a sentinel's.
func (r *replies) dial(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	raw, err := d.DialContext(ctx, r.network, dst)
	if err != nil {
		return nil, err
	}
	// A plain connection is read and written with raw system calls
	// (rawconn; but see trackedConn.Write): those are calls the runtime's
	// monitor does not watch, which on cores shared with Redis keeps its
	// threads from waking and preempting the one thread every decision
	// passes (docs/redis.md).
	conn := net.Conn(rawconn.Wrap(raw))
	if cfg != nil {
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(dst)
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		conn = tc
	}
	if r.sentinel != nil && d.Resolver == r.sentinel {
		return conn, nil
	}
	v := r.server(dst, true)
	if v == nil {
		return conn, nil
	}
	tc := &trackedConn{Conn: conn, raw: raw, srv: v, dialled: time.Now()}
	v.mu.Lock()
	v.conns[tc] = struct{}{}
	v.mu.Unlock()
	return tc, nil
}

// LastReply returns when a reply last arrived from the Redis server that
// serves hits (on a Cluster, the least recent among their nodes), for the
// engine (limiter.ReplyClock): or when it was last asked, if later, a
// connection that owed it nothing having been written to since; or now
// while it owes nothing, or its replies wait unread. It reports false for a store made by
// NewFromClient, whose connections it does not see, and on a Cluster for
// a slot whose node it does not know yet.
func (s *Store) LastReply(hits []limiter.Hit) (time.Time, bool) {
	return s.lastReply(len(hits), func(i int) (uint16, bool) {
		if hits[i].Rule == nil {
			return 0, false
		}
		return slot(s.Key(hits[i].Rule, hits[i].Key)), true
	})
}

// Partition returns the address of the Cluster node that serves all of
// hits, as the slot map the store keeps names it, for the engine
// (limiter.Partitioner): the engine then keeps a circuit breaker per node,
// and a call goes through those of the nodes its hits are on, so that a
// stopped node costs only the calls on its slots (a call on several nodes
// that fails names the node that failed: limiter.PartitionError). It
// reports false for
// hits on several nodes or on a slot whose node it does not know (before
// the slot map was read, say), for a store made by NewFromClient, and
// outside a Cluster, where one server serves every hit and the engine's
// shared breaker is that server's.
func (s *Store) Partition(hits []limiter.Hit) (string, bool) {
	r := s.replies
	if r == nil || !r.cluster || len(hits) == 0 {
		return "", false
	}
	m := r.slots.Load()
	if m == nil {
		return "", false
	}
	var owner uint16
	for i := range hits {
		h := &hits[i]
		if h.Rule == nil {
			return "", false
		}
		o := m.owner[s.keySlot(h.Rule, h.Key)]
		if o == 0 || i > 0 && o != owner {
			return "", false
		}
		owner = o
	}
	return m.addrs[owner-1], true
}

var _ limiter.Partitioner = (*Store)(nil)

// keySlot is slot(s.Key(r, subject)), without making the key when the
// prefix has no '{' (the key's hash tag is then the subject's).
func (s *Store) keySlot(r *limiter.Rule, subject string) uint16 {
	if indexByte(s.prefix, '{') >= 0 {
		return slot(s.Key(r, subject))
	}
	if subject == "" || subject[0] == '}' {
		return crc16("#") // the tag of <prefix>#{#}<subject>:<rule id>
	}
	if j := indexByte(subject, '}'); j >= 0 {
		subject = subject[:j]
	}
	return crc16(subject)
}

// lastReply is LastReply for n slots: slotOf(i) returns the i-th, or false
// for none.
func (s *Store) lastReply(n int, slotOf func(i int) (uint16, bool)) (time.Time, bool) {
	r := s.replies
	if r == nil {
		return time.Time{}, false
	}
	now := time.Now()
	if !r.cluster {
		return r.all.replied(now), true
	}
	r.asked.Store(int64(now.Sub(r.base)))
	m := r.slots.Load()
	if m == nil || now.Sub(m.read) > staleSlots {
		r.watch()
	}
	if m == nil {
		return time.Time{}, false
	}
	var oldest time.Time
	first := true
	judge := func(addr string) bool {
		v := r.server(addr, false)
		if v == nil {
			return false
		}
		last := v.replied(now)
		if now.Sub(last) >= silentAfter {
			r.watch()
		}
		if first || last.Before(oldest) {
			oldest, first = last, false
		}
		return true
	}
	recent := m.prev != nil && now.Sub(m.changed) < movedFor
	for i := range n {
		sl, ok := slotOf(i)
		if !ok {
			continue
		}
		if !judge(m.node(sl)) {
			return time.Time{}, false
		}
		if recent {
			if was := m.prev.node(sl); was != "" && was != m.node(sl) {
				judge(was)
			}
		}
	}
	return oldest, !first
}

// ProgressContext returns the context of a call of the store's client
// (Client) on keys, named as in Redis, that ends as the engine ends its
// store calls, by the engine's own rule (limiter.ProgressCheck): at
// timeout only when no reply at all arrived from the servers that serve
// keys for that long (a stopped, unreachable or stuck Redis), looking
// again when that check ran late (this process did not run, and a reply
// may be read but not yet recorded); while replies keep arriving (a busy
// Redis, or this process short of CPU, so that its replies wait unread)
// once timeout has passed since the last one, at the latest at hard
// (below timeout: timeout). Where the store cannot tell when Redis last
// answered (NewFromClient), the context ends at timeout. It also ends
// with parent, and when cancel is called; its Err is then
// context.DeadlineExceeded when its time was up. Its Deadline is parent's:
// the end moves.
func (s *Store) ProgressContext(parent context.Context, keys []string, timeout, hard time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	var slots []uint16
	if s.mode == Cluster {
		slots = make([]uint16, len(keys))
		for i, k := range keys {
			slots[i] = slot(k)
		}
	}
	c := &progressCtx{Context: parent, done: make(chan struct{})}
	check := limiter.NewProgressCheck(time.Now(), timeout, hard, time.Time{})
	reply := func() (time.Time, bool) {
		last, ok := s.lastReply(len(slots), func(i int) (uint16, bool) { return slots[i], true })
		if h := s.looked.Load(); h != nil {
			(*h)()
		}
		return last, ok
	}
	c.mu.Lock()
	c.timer = time.AfterFunc(timeout, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			return
		}
		now := time.Now()
		if check.Check(now, reply).Ended() {
			c.endLocked(context.DeadlineExceeded)
			return
		}
		c.timer.Reset(check.Due().Sub(now))
	})
	c.mu.Unlock()
	stop := context.AfterFunc(parent, func() { c.end(context.Cause(parent)) })
	return c, func() {
		stop()
		c.mu.Lock()
		c.timer.Stop()
		c.mu.Unlock()
		c.end(context.Canceled)
	}
}

// progressCtx is a context made by ProgressContext.
type progressCtx struct {
	context.Context // the parent, for Deadline and Value
	done            chan struct{}

	mu    sync.Mutex // guards timer and err
	timer *time.Timer
	err   error // why it ended (nil: it has not)
}

// end ends the context with err, unless it has ended.
func (c *progressCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(err)
}

// endLocked is end with mu held.
func (c *progressCtx) endLocked(err error) {
	if c.err == nil {
		c.err = err
		c.timer.Stop()
		close(c.done)
	}
}

// Done is closed when the context ends.
func (c *progressCtx) Done() <-chan struct{} { return c.done }

// Err returns why the context ended, nil while it has not.
func (c *progressCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

var _ limiter.ReplyClock = (*Store)(nil)

// watch starts reading the slot map every watchEvery, unless that runs
// already, until watchFor after the last slow call.
func (r *replies) watch() {
	if r.client == nil || !r.watching.CompareAndSwap(false, true) {
		return
	}
	r.watchers.Add(1)
	go func() {
		defer r.watchers.Done()
		defer r.watching.Store(false)
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			r.readSlots()
			if time.Since(r.base)-time.Duration(r.asked.Load()) > watchFor {
				return
			}
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
		}
	}()
}

// close stops the watch and waits for it.
func (r *replies) close() {
	close(r.stop)
	r.watchers.Wait()
}

// readSlots reads the slot map from a node that answers, and closes the
// connections to nodes that served slots and serve none now.
func (r *replies) readSlots() {
	m, err := r.fetchSlots()
	if err != nil {
		return
	}
	old := r.slots.Load()
	if old != nil {
		if m.sameOwners(old) {
			m.prev, m.changed = old.prev, old.changed
		} else {
			was := *old
			was.prev = nil
			m.prev, m.changed = &was, m.read
		}
	}
	r.slots.Store(m)
	if old == nil {
		return
	}
	for i, addr := range old.addrs {
		if slices.Contains(m.addrs, addr) || !slices.Contains(old.owner[:], uint16(i+1)) {
			continue
		}
		if v := r.server(addr, false); v != nil && v.closeAll() > 0 {
			r.follows.Add(1)
			if r.log != nil {
				r.log.Info("redisstore: a node's slots moved while it answered nothing; its connections are closed", "node", addr)
			}
		}
	}
}

// fetchSlots asks the nodes that answered most recently for CLUSTER
// SLOTS, each within a short timeout, and parses the first answer.
func (r *replies) fetchSlots() (*slotMap, error) {
	nodes := r.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	// The nodes heard from last first: a silent one would make the
	// read wait for its timeout.
	recent := func(a string) time.Time {
		if v := r.server(a, false); v != nil {
			return v.lastReply()
		}
		return time.Time{}
	}
	slices.SortFunc(addrs, func(a, b string) int { return recent(b).Compare(recent(a)) })
	err := errors.New("redisstore: no node to read the slot map from")
	for _, a := range addrs[:min(len(addrs), 3)] {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		res := nodes[a].Do(ctx, nodes[a].B().ClusterSlots().Build())
		cancel()
		var m *slotMap
		if m, err = parseSlots(res, a); err == nil {
			return m, nil
		}
	}
	return nil, err
}

// parseSlots reads a CLUSTER SLOTS reply from the node at from: ranges of
// slots with their primary first, as [host, port, ...] (an empty host is
// from's, "?" unknown), the way the client names the nodes it dials.
func parseSlots(res rueidis.RedisResult, from string) (*slotMap, error) {
	ranges, err := res.ToArray()
	if err != nil {
		return nil, fmt.Errorf("redisstore: cluster slots: %w", err)
	}
	m := &slotMap{read: time.Now()}
	for _, rg := range ranges {
		v, err := rg.ToArray()
		if err != nil || len(v) < 3 {
			return nil, fmt.Errorf("redisstore: cluster slots: bad range %v", err)
		}
		lo, err1 := v[0].AsInt64()
		hi, err2 := v[1].AsInt64()
		node, err3 := v[2].ToArray()
		if err := errors.Join(err1, err2, err3); err != nil || len(node) < 2 || lo < 0 || hi > 16383 || lo > hi {
			return nil, fmt.Errorf("redisstore: cluster slots: bad range %d-%d: %v", lo, hi, err)
		}
		host, err1 := node[0].ToString()
		port, err2 := node[1].AsInt64()
		if err1 != nil || err2 != nil || host == "?" {
			continue
		}
		if host == "" {
			host, _, _ = net.SplitHostPort(from)
		}
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		i := slices.Index(m.addrs, addr)
		if i < 0 {
			m.addrs = append(m.addrs, addr)
			i = len(m.addrs) - 1
		}
		for sl := lo; sl <= hi; sl++ {
			m.owner[sl] = uint16(i + 1)
		}
	}
	return m, nil
}

// unread reports whether bytes wait in the kernel's receive buffer of c,
// not yet read by this process: Redis has answered, but the goroutine
// that reads the connection has not run. Off Linux it is never told.
func unread(c net.Conn) bool {
	n, _ := rawconn.Unread(c)
	return n > 0
}
