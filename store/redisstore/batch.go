package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/redis/rueidis"
)

// Batching. Requests that arrive while script calls are in flight are
// decided together by the next call: one script call takes many requests
// and answers each, as if each had been sent alone, in arrival order. A
// call is sent at once when its lane (the server, or one Cluster slot) has
// nothing waiting and no call in flight, or one call of one request (two
// callers take turns without waiting for each other); so a lone caller
// never waits for a batch to fill, and batches form only under load, from
// the requests that queue behind the call in flight. A further call (up
// to BatchesInFlight) goes beside it only once enough requests wait
// (spillAt: MaxBatch/8, and no fewer than the calls in flight carry), and
// a call that ends beside another takes the queue on only as long: a few
// callers then share one call instead of each sending its own, a long
// queue still keeps the connection busy while a reply travels, and many
// callers fill a few large calls rather than many small ones (Redis pays
// about 15 µs a call besides each request's own work).

// Batching defaults.
const (
	// DefaultMaxBatch is the default of Options.MaxBatch.
	DefaultMaxBatch = 128
	// DefaultBatchesInFlight is the default of Options.BatchesInFlight.
	DefaultBatchesInFlight = 3
)

// States of a request handed to a lane.
const (
	stQueued int32 = iota // waiting in the lane
	stTaken               // in a script call in flight
	stDone                // answered; the caller reads the results
	stGone                // the caller left; whoever holds the request recycles it
)

// request is one request's part of a script call: its hits in one slot.
type request struct {
	code byte      // apply.lua's op: opCodes[op], or opLease
	keys []string  // the hits' keys
	recs []string  // a reserve's settle record keys, while prepared
	hits []hitArgs // what the script needs of each hit
	ls   leaseArgs // a lease's numbers
	now  int64     // places quota periods (Unix ns; 0: this machine's clock)
	test string    // the test clock for the script ("" for the server's)
	idx  []int     // the hits' indexes in the caller's slice
	vals []int64   // the answer: 6 values per hit
	err  error
	mark int64 // the server's instant (µs)
	got  int64 // charged (1) or not (0); for a lease, the units taken

	deadline time.Time // the caller's (zero: none)
	run      *batchRun // the call that took it, once taken
	state    atomic.Int32
	done     chan struct{} // one token when answered
}

// batchRun is the script call of one batch on its way. It ends when its
// answer comes, at the latest deadline of its requests when they all have
// one, or as soon as no caller waits for it any longer (a caller whose
// context ends without a fixed deadline, such as the engine's, which
// waits while Redis makes progress).
type batchRun struct {
	waiting atomic.Int32 // callers still waiting, plus one while the batch is taken
	cancel  context.CancelFunc
}

// leave drops one waiting caller, and ends the call when none is left.
func (b *batchRun) leave() {
	if b.waiting.Add(-1) == 0 {
		b.cancel()
	}
}

// leaseArgs are the numbers of a lease request: units wanted and given
// back, with their cost in time for rate algorithms, and the given-back
// lease's mark.
type leaseArgs struct {
	want, back   int64
	wtNs, btNs   int64
	wtRem, btRem uint64
	mark         int64
}

// hitArgs is one hit as apply.lua takes it.
type hitArgs struct {
	ra    *ruleArgs
	cost  int64
	ctNs  int64  // cost·T (rate algorithms)
	ctRem uint64 //
	lease string // a concurrency lease's name ("": none)
	ttl   int64  // a reserved hit's settle record TTL in ms (0: not reserved)
	flags byte   // a flagged charge's: check (bit 0) and group (the rest)
}

var requestPool = sync.Pool{New: func() any {
	return &request{idx: make([]int, 0, 4), keys: make([]string, 0, 4), hits: make([]hitArgs, 0, 4),
		done: make(chan struct{}, 1)}
}}

func getRequest() *request { return requestPool.Get().(*request) }

func putRequest(rq *request) {
	clear(rq.keys)
	clear(rq.hits)
	rq.idx, rq.keys, rq.hits, rq.vals = rq.idx[:0], rq.keys[:0], rq.hits[:0], rq.vals[:0]
	rq.err, rq.deadline, rq.run = nil, time.Time{}, nil
	requestPool.Put(rq)
}

// lane queues the requests of one server or one Cluster slot.
type lane struct {
	mu      sync.Mutex // guards pending and busy
	pending []*request
	busy    int // script calls in flight
	reqs    int // requests in those calls
}

// laneFor returns the lane of a slot (the one lane of a standalone server).
func (s *Store) laneFor(sl uint16) *lane {
	if s.mode != Cluster {
		return &s.single
	}
	if ln := s.slotLanes[sl].Load(); ln != nil {
		return ln
	}
	s.slotLanes[sl].CompareAndSwap(nil, new(lane))
	return s.slotLanes[sl].Load()
}

// send has rq decided on its lane and waits for the answer (in rq) within
// ctx. It reports whether the caller still owns rq: when ctx ends first,
// the request belongs to the lane, which recycles it. An error wrapping
// limiter.ErrNotSent means the request was never sent.
func (s *Store) send(ctx context.Context, ln *lane, rq *request) (bool, error) {
	if s.maxBatch <= 1 {
		s.exec(ctx, []*request{rq})
		return true, rq.err
	}
	ln.mu.Lock()
	if len(ln.pending) == 0 && (ln.busy == 0 || ln.busy < s.inFlight && ln.reqs < 2) {
		// Nothing waits, and at most one other request is in flight:
		// send at once, from this goroutine.
		ln.busy++
		ln.reqs++
		ln.mu.Unlock()
		one := [1]*request{rq}
		s.exec(ctx, one[:])
		s.handOn(ln, 1)
		return true, rq.err
	}
	rq.deadline, _ = ctx.Deadline()
	rq.state.Store(stQueued)
	ln.pending = append(ln.pending, rq)
	if ln.busy < s.inFlight && len(ln.pending) >= s.spillAt(ln) {
		// Enough wait for a call of their own beside those in flight.
		ln.busy++
		s.startBatches(ln)
	}
	ln.mu.Unlock()
	select {
	case <-rq.done:
		return true, rq.err
	case <-ctx.Done():
	}
	if rq.state.CompareAndSwap(stQueued, stGone) {
		return false, fmt.Errorf("redisstore: %w: %w", limiter.ErrNotSent, ctx.Err())
	}
	if rq.state.Load() == stTaken {
		// Read before the state changes: once gone, rq is recycled.
		run := rq.run
		if rq.state.CompareAndSwap(stTaken, stGone) {
			// In a call in flight: it may still be applied.
			run.leave()
			return false, fmt.Errorf("redisstore: eval: %w", ctx.Err())
		}
	}
	<-rq.done // answered just now
	return true, rq.err
}

// spillAt is how many requests must wait on ln (whose lock the caller
// holds) before a further call goes beside those in flight: an eighth of
// MaxBatch (16 by default), and at least as many as the calls in flight
// carry. Without the second bound, 64 callers kept three calls of about
// 16 in flight; with it, two of about 26 (docs/redis.md).
func (s *Store) spillAt(ln *lane) int { return max(1, s.maxBatch/8, ln.reqs) }

// goOn reports whether a call of the lane (whose lock the caller holds)
// that just ended should take the waiting requests on: when it was the
// only call in flight, or enough wait for a call beside the other. Else
// the call in flight takes them when it ends.
func (s *Store) goOn(ln *lane) bool {
	return len(ln.pending) > 0 && (ln.busy == 1 || len(ln.pending) >= s.spillAt(ln))
}

// handOn starts the next batch of a lane whose call of n requests just
// ended, in a goroutine of its own that goes on while requests wait, or
// marks the call's place free.
func (s *Store) handOn(ln *lane, n int) {
	ln.mu.Lock()
	ln.reqs -= n
	if s.goOn(ln) {
		s.startBatches(ln)
	} else {
		ln.busy--
	}
	ln.mu.Unlock()
}

// startBatches takes the next batch of a lane (whose lock the caller
// holds, with a call's place counted in busy, and requests waiting) and
// sends it in a goroutine of its own, which goes on with the next batches
// while requests wait, then frees the place.
func (s *Store) startBatches(ln *lane) {
	b, ctx, cancel := s.take(ln)
	s.batches.Add(1)
	go func() {
		defer s.batches.Done()
		for {
			if len(b) > 0 {
				s.exec(ctx, b)
				s.finish(b)
			}
			cancel()
			ln.mu.Lock()
			ln.reqs -= len(b)
			if !s.goOn(ln) {
				ln.busy--
				ln.mu.Unlock()
				return
			}
			b, ctx, cancel = s.take(ln)
			ln.mu.Unlock()
		}
	}()
}

// take removes up to MaxBatch waiting requests from the lane (whose lock
// the caller holds) and returns those whose callers still wait, with the
// context of their call (see batchRun).
func (s *Store) take(ln *lane) ([]*request, context.Context, context.CancelFunc) {
	n := min(len(ln.pending), s.maxBatch)
	b := make([]*request, 0, n)
	ctx, cancel := context.WithCancel(context.Background())
	run := &batchRun{cancel: cancel}
	run.waiting.Store(1)
	var latest time.Time
	fixed := true // every request has a deadline
	for _, rq := range ln.pending[:n] {
		run.waiting.Add(1)
		rq.run = run
		if !rq.state.CompareAndSwap(stQueued, stTaken) {
			run.waiting.Add(-1)
			putRequest(rq) // its caller left
			continue
		}
		b = append(b, rq)
		if rq.deadline.IsZero() {
			fixed = false
		} else if rq.deadline.After(latest) {
			latest = rq.deadline
		}
	}
	ln.reqs += len(b)
	rest := copy(ln.pending, ln.pending[n:])
	clear(ln.pending[rest:])
	ln.pending = ln.pending[:rest]
	run.leave() // the callers that left meanwhile may have been all
	if fixed && len(b) > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, latest)
		return b, ctx, func() { stop(); cancel() }
	}
	return b, ctx, cancel
}

// finish hands the answers of a batch to its callers, and recycles the
// requests of callers that left.
func (s *Store) finish(b []*request) {
	for _, rq := range b {
		if rq.state.CompareAndSwap(stTaken, stDone) {
			rq.done <- struct{}{}
		} else {
			putRequest(rq)
		}
	}
}

// Op codes of apply.lua.
var opCodes = [...]byte{opCharge: 1, opPeek: 2, opRelease: 3, opReserve: 5, opSettle: 6}

// opLease is apply.lua's lease op.
const opLease = 4

// opFlagged is apply.lua's charge whose hits carry flags (limiter.Hit's
// Check and Group): a byte per hit after the request's header.
const opFlagged = 7

// groupOpen is the group of a flagged hit whose group spans Cluster
// slots: its denial stops nothing in its slot's script, and the store
// works out the group's verdict from every slot's decisions.
const groupOpen = 127

// hitFlags is apply.lua's flags byte of a hit: bit 0 a check, bits 1..7
// its group.
func hitFlags(check bool, group uint8) byte {
	f := group << 1
	if check {
		f |= 1
	}
	return f
}

// eval runs script with keys and args. A panic of the client (it refuses
// to build a call whose keys fall in several Cluster slots) is the call's
// error, not the process's end: the store's own goroutines send calls
// too, where nothing would recover it.
//
// A TRYAGAIN reply (a Cluster slot being moved to another node, with the
// call's keys split between the two) means that the script did not run:
// eval waits and sends the call again (1 ms, doubling up to 32 ms) until
// it runs, ctx ends or tryAgainFor has passed (a migration left half done
// keeps answering TRYAGAIN; the call then fails with it). exec sends a
// call of several requests with evalOnce instead, and on TRYAGAIN sends
// them one by one.
func (s *Store) eval(ctx context.Context, script *rueidis.Lua, keys, args []string) (rueidis.RedisResult, error) {
	wait := time.Millisecond
	var until time.Time
	for {
		res, err := s.evalOnce(ctx, script, keys, args)
		if !tryAgain(err) {
			return res, err
		}
		if until.IsZero() {
			until = time.Now().Add(tryAgainFor)
		} else if time.Now().After(until) {
			return res, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
		wait = min(2*wait, 32*time.Millisecond)
	}
}

// tryAgainFor bounds how long eval sends a call again that Redis answers
// TRYAGAIN: the engine's hard timeout by default.
const tryAgainFor = 2 * time.Second

// tryAgain reports whether err is Redis' TRYAGAIN: a command naming keys
// of a slot in migration that are not all on one node, refused before it
// ran.
func tryAgain(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsTryAgain()
}

// evalOnce is one attempt of eval. A READONLY reply (the server is a
// replica now) closes the connections made before the call was sent (see
// replicaAnswered), and the call, which wrote nothing (a replica refuses
// a script's first write), is sent once more, on a new connection. The
// client learns of that close when it next reads or writes the connection:
// a call sent again before it has may be written to the closed connection
// and fail there, unsent (net.ErrClosed), and is then sent again, at most
// closedRetries times.
func (s *Store) evalOnce(ctx context.Context, script *rueidis.Lua, keys, args []string) (res rueidis.RedisResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the client refused the call: %v", p)
		}
	}()
	followed, closed := false, 0
	for {
		sent := time.Now()
		res = script.Exec(ctx, s.client, keys, args)
		err = res.Error()
		switch {
		case ctx.Err() != nil:
			return res, err
		case !followed && readOnly(err) && s.replicaAnswered(sent, err):
			followed = true
		case followed && closed < closedRetries && errors.Is(err, net.ErrClosed):
			closed++
		default:
			return res, err
		}
	}
}

// closedRetries bounds how many times a call sent again after a READONLY
// answer is sent once more when it met a connection that answer closed.
const closedRetries = 3

// readOnly reports whether err is Redis' READONLY: a write sent to a
// replica.
func readOnly(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "READONLY")
}

// replicaAnswered closes the connections to a standalone or Sentinel-managed
// server made before sent, a call sent then having been answered READONLY:
// the server they reach is a replica now. After a failover behind one
// address (a DNS name or a virtual IP moved to the new primary, as managed
// services do) Redis keeps the old primary's connections open, so without
// this every decision would be refused there until the process restarted;
// the next call connects again and reaches the primary. A Cluster answers
// MOVED instead, which its client follows. It reports whether the store
// follows such a failover (not on a Cluster, nor on connections made by
// the caller of NewFromClient): a call sent again then goes on a
// connection made after sent.
func (s *Store) replicaAnswered(sent time.Time, err error) bool {
	if s.replies == nil || s.replies.cluster {
		return false
	}
	n := s.replies.all.closeDialledBefore(sent)
	if n == 0 {
		return true // closed already, by a call answered beside this one
	}
	if held, ok := s.replicaLog.Pass(time.Now()); ok {
		s.log.Warn("redisstore: Redis answered as a replica (READONLY), as after a failover: its connections are closed and the next call connects again",
			"err", err, "closed", n, "not_logged_since", held)
	}
	return true
}

// exec sends the requests in one script call and writes each answer (or
// the call's error) into its request.
func (s *Store) exec(ctx context.Context, b []*request) {
	buf := callBufPool.Get().(*callBuf)
	keys, args := buf.build(b)
	s.calls.Add(1)
	s.decided.Add(int64(len(b)))
	var res rueidis.RedisResult
	var err error
	if len(b) == 1 {
		res, err = s.eval(ctx, s.apply, keys, args)
	} else {
		res, err = s.evalOnce(ctx, s.apply, keys, args)
	}
	buf.reset()
	callBufPool.Put(buf)
	fail := func(err error) {
		for _, rq := range b {
			rq.err = err
		}
	}
	if len(b) > 1 && tryAgain(err) {
		// The batch's keys are split between the two nodes of a slot in
		// migration, and nothing ran. A request alone names the keys of
		// one subject, which the migration leaves split for a moment at
		// most (one key: never): each goes in a call of its own, all at
		// once, and waits out its own TRYAGAIN. This call decided none.
		s.calls.Add(-1)
		s.decided.Add(-int64(len(b)))
		s.execApart(ctx, b)
		return
	}
	if err != nil {
		fail(fmt.Errorf("redisstore: eval: %w", err))
		return
	}
	reply, err := res.ToString()
	want := 8
	for _, rq := range b {
		if rq.short() {
			want += shortLen
		} else {
			want += 8 * (1 + 6*len(rq.hits))
		}
	}
	if err != nil || len(reply) != want {
		fail(fmt.Errorf("redisstore: eval: unexpected reply (%d bytes, want %d): %v", len(reply), want, err))
		return
	}
	num := func(at int) int64 {
		return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(reply[at : at+8]))))
	}
	mark := num(0)
	at := 8
	for _, rq := range b {
		rq.mark = mark
		rq.vals = rq.vals[:0]
		if rq.short() {
			// charged + 2·allowed + 4·never, remaining, wait, reset
			f := reply[at]
			rem, wait, reset := num(at+1), num(at+9), num(at+17)
			at += shortLen
			rq.got = int64(f & 1)
			if f&2 != 0 {
				rq.vals = append(rq.vals, 1, rem, 0, reset, wait, 0)
			} else {
				rq.vals = append(rq.vals, 0, rem, wait, reset, 0, int64(f>>2&1))
			}
			continue
		}
		rq.got = num(at)
		at += 8
		for range 6 * len(rq.hits) {
			rq.vals = append(rq.vals, num(at))
			at += 8
		}
	}
}

// execApart sends each request of b in a script call of its own, all at
// once (the client pipelines them), and returns once every one answered.
func (s *Store) execApart(ctx context.Context, b []*request) {
	var wg sync.WaitGroup
	for _, rq := range b {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.exec(ctx, []*request{rq})
		}()
	}
	wg.Wait()
}

// shortLen is the length of a request's answer in apply.lua's short form.
const shortLen = 1 + 3*8

// short reports whether apply.lua answers rq in its short form: a charge
// or a peek of one hit of a rate algorithm or a fixed window (the
// script's straight path, by the same test).
func (rq *request) short() bool {
	if (rq.code != opCodes[opCharge] && rq.code != opCodes[opPeek]) || len(rq.hits) != 1 {
		return false
	}
	alg := rq.hits[0].ra.alg
	return alg.Family() == floodgate.FamilyRate || alg == floodgate.FixedWindow
}

// callBuf holds the arguments of one call while it is built.
type callBuf struct {
	keys, args, leases []string
	rules              []*ruleArgs
	blob               []byte
}

var callBufPool = sync.Pool{New: func() any { return new(callBuf) }}

func (c *callBuf) reset() {
	clear(c.keys)
	clear(c.args)
	clear(c.leases)
	clear(c.rules)
	c.keys, c.args, c.leases, c.rules, c.blob = c.keys[:0], c.args[:0], c.leases[:0], c.rules[:0], c.blob[:0]
}

// build returns the keys and the arguments of apply.lua for the requests:
// the rules they use, once each, then the requests packed in one argument,
// then the names of their concurrency leases.
func (c *callBuf) build(b []*request) ([]string, []string) {
	for _, rq := range b {
		c.keys = append(c.keys, rq.keys...)
		for i := range rq.hits {
			if ra := rq.hits[i].ra; !slices.Contains(c.rules, ra) {
				c.rules = append(c.rules, ra)
			}
		}
	}
	c.args = append(c.args, b[0].test, strconv.Itoa(len(c.rules)))
	now := b[0].now
	for _, ra := range c.rules {
		p := &ra.params
		if ra.alg.Family() == floodgate.FamilyQuota {
			if now == 0 {
				now = time.Now().UnixNano()
			}
			q := ra.bounds(now)
			c.args = append(c.args, ra.algStr, ra.shadow, p[0], q[0], q[1], q[2], q[3], q[4], p[6], p[7], ra.lease)
		} else {
			c.args = append(c.args, ra.algStr, ra.shadow, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], ra.lease)
		}
	}
	firstLease := len(c.args) + 2 // ARGV index (1-based) of the first lease name
	le := binary.LittleEndian
	f64 := func(v float64) { c.blob = le.AppendUint64(c.blob, math.Float64bits(v)) }
	for _, rq := range b {
		c.blob = append(c.blob, rq.code)
		c.blob = le.AppendUint32(c.blob, uint32(len(rq.hits)))
		if rq.code == opLease {
			ls := &rq.ls
			f64(float64(ls.want))
			f64(float64(ls.wtNs))
			f64(float64(ls.wtRem))
			f64(float64(ls.back))
			f64(float64(ls.btNs))
			f64(float64(ls.btRem))
			f64(float64(ls.mark))
		}
		if rq.code == opCodes[opReserve] {
			for i := range rq.hits {
				f64(float64(rq.hits[i].ttl))
			}
		}
		if rq.code == opFlagged {
			for i := range rq.hits {
				c.blob = append(c.blob, rq.hits[i].flags)
			}
		}
		for i := range rq.hits {
			h := &rq.hits[i]
			li := 0
			if h.lease != "" {
				li = firstLease + len(c.leases)
				c.leases = append(c.leases, h.lease)
			}
			c.blob = le.AppendUint32(c.blob, uint32(slices.Index(c.rules, h.ra)+1))
			f64(float64(h.cost))
			f64(float64(h.ctNs))
			f64(float64(h.ctRem))
			c.blob = le.AppendUint32(c.blob, uint32(li))
		}
	}
	c.args = append(c.args, string(c.blob))
	c.args = append(c.args, c.leases...)
	return c.keys, c.args
}
