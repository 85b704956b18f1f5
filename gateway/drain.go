package gateway

import (
	"context"
	"errors"
	"sync"
	"time"
)

// What a request with a reservation costs when its client leaves: the
// upstream's answer is read on to its end, discarding it, so that the cost
// it tells (the usage at the end of a body or of a stream) is known, within
// two bounds: the time from the client leaving (and the answer's status
// line) and the bytes discarded. Past either, the upstream's request is
// ended and the reservation keeps its estimate, or what the answer told
// before if that is more (actualCosts).

// drainBounds bound reading an answer after its client left.
type drainBounds struct {
	wait  time.Duration
	bytes int64
}

// errDrained ends the copy of an answer whose client left once more than
// the drain bound's bytes were discarded.
var errDrained = errors.New("gateway: the client left and the rest of the answer is over the drain bound")

// drainer ends the upstream request of a net/http exchange whose client
// left: at once when what remains of the answer cannot change the charge,
// else once the drain time has passed since both the client left and the
// answer's status came. Until then the request goes on without its client.
type drainer struct {
	wait    time.Duration
	cancel  context.CancelFunc // ends the upstream request
	unwatch func() bool        // stops watching the client's context

	mu       sync.Mutex // guards the fields below
	gone     bool       // the client left
	answered bool       // the upstream's status is known
	body     bool       // the rest of the body may tell a cost
	ended    bool
	timer    *time.Timer
}

// clientLeft notes that the client went away.
func (d *drainer) clientLeft() {
	d.mu.Lock()
	d.gone = true
	d.arm()
	d.mu.Unlock()
}

// status notes that the upstream's status is known; body says whether
// the rest of its answer may still tell a cost.
func (d *drainer) status(body bool) {
	d.mu.Lock()
	d.answered, d.body = true, body
	d.arm()
	d.mu.Unlock()
}

// arm starts the drain once the client has left and the status is known.
// d.mu is held.
func (d *drainer) arm() {
	if !d.gone || !d.answered || d.ended || d.timer != nil {
		return
	}
	wait := d.wait
	if !d.body {
		wait = 0 // the charge is final: nothing to wait for
	}
	d.timer = time.AfterFunc(wait, d.cancel)
}

// left reports whether the client went away.
func (d *drainer) left() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gone
}

// stop ends the upstream request now.
func (d *drainer) stop() { d.cancel() }

// end is called when the exchange is over.
func (d *drainer) end() {
	if d.unwatch != nil {
		d.unwatch()
	}
	d.mu.Lock()
	d.ended = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
	d.cancel()
}
