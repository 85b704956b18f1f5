package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// Batching. Requests that arrive while script calls are in flight are
// decided together by the next call: one script call takes many requests
// and answers each, as if each had been sent alone, in arrival order. A
// call is sent at once when its lane (the server, or one Cluster slot) has
// fewer than BatchesInFlight calls in flight and nothing waiting; so a lone
// caller never waits for a batch to fill, and batches form only under load,
// from the requests that queue behind the calls in flight.

// Batching defaults.
const (
	// DefaultMaxBatch is the default of Options.MaxBatch.
	DefaultMaxBatch = 128
	// DefaultBatchesInFlight is the default of Options.BatchesInFlight.
	DefaultBatchesInFlight = 2
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
	op    limiter.Op
	n     int      // hits
	keys  []string // the hits' keys
	args  []string // [now, "1", op, n, extra, the hits' arguments...]
	now   int64    // the instant quota periods were placed by (Unix ns; 0: this machine's clock)
	idx   []int    // the hits' indexes in the caller's slice
	vals  []int64  // the answer: 6 values per hit
	err   error
	mark  int64 // the server's instant (µs)
	charg bool  // the call charged this request

	deadline time.Time // the caller's (zero: none)
	state    atomic.Int32
	done     chan struct{} // one token when answered
}

var requestPool = sync.Pool{New: func() any {
	return &request{idx: make([]int, 0, 4), keys: make([]string, 0, 8),
		args: make([]string, 0, 5+4*stride), done: make(chan struct{}, 1)}
}}

func getRequest() *request { return requestPool.Get().(*request) }

func putRequest(rq *request) {
	rq.idx, rq.keys, rq.args, rq.vals = rq.idx[:0], rq.keys[:0], rq.args[:0], rq.vals[:0]
	clear(rq.keys[:cap(rq.keys)])
	clear(rq.args[:cap(rq.args)])
	rq.err, rq.deadline = nil, time.Time{}
	requestPool.Put(rq)
}

// lane queues the requests of one server or one Cluster slot.
type lane struct {
	mu      sync.Mutex // guards pending and busy
	pending []*request
	busy    int // script calls in flight
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
	if ln.busy < s.inFlight && len(ln.pending) == 0 {
		// Nothing waits: send at once, from this goroutine.
		ln.busy++
		ln.mu.Unlock()
		one := [1]*request{rq}
		s.exec(ctx, one[:])
		s.handOn(ln)
		return true, rq.err
	}
	rq.deadline, _ = ctx.Deadline()
	rq.state.Store(stQueued)
	ln.pending = append(ln.pending, rq)
	ln.mu.Unlock()
	select {
	case <-rq.done:
		return true, rq.err
	case <-ctx.Done():
	}
	if rq.state.CompareAndSwap(stQueued, stGone) {
		return false, fmt.Errorf("redisstore: %w: %w", limiter.ErrNotSent, ctx.Err())
	}
	if rq.state.CompareAndSwap(stTaken, stGone) {
		// In a call in flight: it may still be applied.
		return false, fmt.Errorf("redisstore: eval: %w", ctx.Err())
	}
	<-rq.done // answered just now
	return true, rq.err
}

// handOn starts the next batch of a lane whose call just ended, in a
// goroutine of its own that goes on while requests wait, or marks the
// call's place free.
func (s *Store) handOn(ln *lane) {
	ln.mu.Lock()
	if len(ln.pending) == 0 {
		ln.busy--
		ln.mu.Unlock()
		return
	}
	b := s.take(ln)
	ln.mu.Unlock()
	s.batches.Add(1)
	go func() {
		defer s.batches.Done()
		for {
			if len(b) > 0 {
				ctx, cancel := batchContext(b)
				s.exec(ctx, b)
				cancel()
				s.finish(b)
			}
			ln.mu.Lock()
			if len(ln.pending) == 0 {
				ln.busy--
				ln.mu.Unlock()
				return
			}
			b = s.take(ln)
			ln.mu.Unlock()
		}
	}()
}

// take removes up to MaxBatch waiting requests from the lane (whose lock
// the caller holds) and returns those whose callers still wait.
func (s *Store) take(ln *lane) []*request {
	n := min(len(ln.pending), s.maxBatch)
	b := make([]*request, 0, n)
	for _, rq := range ln.pending[:n] {
		if rq.state.CompareAndSwap(stQueued, stTaken) {
			b = append(b, rq)
		} else {
			putRequest(rq) // its caller left
		}
	}
	rest := copy(ln.pending, ln.pending[n:])
	clear(ln.pending[rest:])
	ln.pending = ln.pending[:rest]
	return b
}

// batchContext returns the context of a batch's call: its latest deadline,
// so that the call ends when no caller waits for it any longer.
func batchContext(b []*request) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, rq := range b {
		if rq.deadline.IsZero() {
			return context.Background(), func() {}
		}
		if rq.deadline.After(latest) {
			latest = rq.deadline
		}
	}
	return context.WithDeadline(context.Background(), latest)
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

// exec sends the requests in one script call and writes each answer (or
// the call's error) into its request.
func (s *Store) exec(ctx context.Context, b []*request) {
	keys, args := b[0].keys, b[0].args
	var buf *callBuf
	if len(b) > 1 {
		buf = callBufPool.Get().(*callBuf)
		keys, args = buf.keys[:0], append(buf.args[:0], b[0].args[0], strconv.Itoa(len(b)))
		for _, rq := range b {
			keys = append(keys, rq.keys...)
			args = append(args, rq.args[2:]...)
		}
	}
	s.calls.Add(1)
	s.decided.Add(int64(len(b)))
	res := s.apply.Exec(ctx, s.client, keys, args)
	if buf != nil {
		clear(keys)
		clear(args)
		buf.keys, buf.args = keys[:0], args[:0]
		callBufPool.Put(buf)
	}
	fail := func(err error) {
		for _, rq := range b {
			rq.err = err
		}
	}
	if err := res.Error(); err != nil {
		fail(fmt.Errorf("redisstore: eval: %w", err))
		return
	}
	arr, err := res.ToArray()
	want := 1
	for _, rq := range b {
		want += 1 + 6*rq.n
	}
	if err != nil || len(arr) != want {
		fail(fmt.Errorf("redisstore: eval: unexpected reply (%d values, want %d): %v", len(arr), want, err))
		return
	}
	mark, _ := arr[0].AsInt64()
	at := 1
	for _, rq := range b {
		c, _ := arr[at].AsInt64()
		rq.charg, rq.mark = c == 1, mark
		at++
		rq.vals = rq.vals[:0]
		for range 6 * rq.n {
			v, err := arr[at].AsInt64()
			if err != nil {
				rq.err = fmt.Errorf("redisstore: eval: unexpected reply: %w", err)
			}
			rq.vals = append(rq.vals, v)
			at++
		}
	}
}

// callBuf holds the arguments of one batch's call while it is built.
type callBuf struct {
	keys, args []string
}

var callBufPool = sync.Pool{New: func() any { return new(callBuf) }}
