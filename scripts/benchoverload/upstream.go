package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// upstreamHeader marks every answer the upstream gives, so that the load
// generator tells the gateway's own refusals (a 503 without it) from the
// upstream's.
const upstreamHeader = "X-Bench-Upstream"

// upstream is a service whose capacity is known: a FIFO queue in front of
// a number of workers, each of which serves one request at a time by
// sleeping for the service time. Its capacity is active workers divided by
// the service time, whatever the CPU does, and its latency rises when more
// arrives than that: requests wait in the queue. A request that finds the
// queue full is answered 503 at once; one whose client left before a
// worker took it is dropped without being served.
type upstream struct {
	service time.Duration
	queue   chan *job

	active atomic.Int32 // workers that serve; the others wait

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed and replaced when active changes

	served   atomic.Int64 // requests served
	busyNS   atomic.Int64 // time spent serving them, in nanoseconds
	busy     atomic.Int32 // workers serving right now
	rejected atomic.Int64 // requests that found the queue full

	inflight    atomic.Int64 // requests in the handler: queued or served
	maxInflight atomic.Int64 // the most in the handler since peak was last called

	stop chan struct{}
	wg   sync.WaitGroup
	srv  *http.Server
	ln   net.Listener
}

type job struct {
	ctx  context.Context
	done chan struct{}
}

// startUpstream listens on a loopback port and starts workers workers (all
// of them active) behind a queue of queueSize requests.
func startUpstream(workers int, service time.Duration, queueSize int) (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{
		service: service,
		queue:   make(chan *job, queueSize),
		changed: make(chan struct{}),
		stop:    make(chan struct{}),
		ln:      ln,
	}
	u.active.Store(int32(workers))
	for i := range workers {
		u.wg.Add(1)
		go u.work(int32(i))
	}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// URL is the upstream's base URL.
func (u *upstream) URL() string { return "http://" + u.ln.Addr().String() }

// setWorkers makes the first n workers serve and the others wait.
func (u *upstream) setWorkers(n int) {
	u.mu.Lock()
	u.active.Store(int32(n))
	close(u.changed)
	u.changed = make(chan struct{})
	u.mu.Unlock()
}

func (u *upstream) changes() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.changed
}

func (u *upstream) work(id int32) {
	defer u.wg.Done()
	for {
		changed := u.changes()
		if id >= u.active.Load() {
			select {
			case <-changed:
				continue
			case <-u.stop:
				return
			}
		}
		select {
		case j := <-u.queue:
			if j.ctx.Err() != nil {
				continue
			}
			u.busy.Add(1)
			start := time.Now()
			time.Sleep(u.service)
			u.busyNS.Add(int64(time.Since(start)))
			u.served.Add(1)
			u.busy.Add(-1)
			close(j.done)
		case <-changed:
		case <-u.stop:
			return
		}
	}
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set(upstreamHeader, "1")
	n := u.inflight.Add(1)
	defer u.inflight.Add(-1)
	for m := u.maxInflight.Load(); n > m && !u.maxInflight.CompareAndSwap(m, n); m = u.maxInflight.Load() {
	}
	j := &job{ctx: r.Context(), done: make(chan struct{})}
	select {
	case u.queue <- j:
	default:
		u.rejected.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	select {
	case <-j.done:
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	case <-r.Context().Done():
	}
}

// peak is the most requests the upstream held at once (queued or served)
// since the last call.
func (u *upstream) peak() int64 {
	return u.maxInflight.Swap(u.inflight.Load())
}

// meanService is the mean time a worker took to serve one request (the
// sleep and the scheduler's delay in waking it), or the nominal service
// time before any was served.
func (u *upstream) meanService() time.Duration {
	n := u.served.Load()
	if n == 0 {
		return u.service
	}
	return time.Duration(u.busyNS.Load() / n)
}

// idle waits until no request is queued or served, or the context ends.
func (u *upstream) idle(ctx context.Context) error {
	for len(u.queue) > 0 || u.busy.Load() > 0 {
		select {
		case <-ctx.Done():
			return errors.New("the upstream is still busy")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// close stops the listener and the workers.
func (u *upstream) close() {
	_ = u.srv.Close()
	close(u.stop)
	u.wg.Wait()
}
