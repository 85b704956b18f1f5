package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// LimiterEngine adapts the engine (limiter.Limiter: failure policies, the
// local fallback and the circuit breaker) to the gateway's Engine,
// including Release of concurrency leases and Refund of queued requests
// whose client went away.
func LimiterEngine(l *limiter.Limiter) Engine {
	e := &limiterEngine{l: l}
	e.pool.New = func() any { return new(limiter.Result) }
	return e
}

type limiterEngine struct {
	l    *limiter.Limiter
	pool sync.Pool // *limiter.Result
}

func (e *limiterEngine) Apply(ctx context.Context, op limiter.Op, hits []limiter.Hit, out []floodgate.Decision) error {
	if len(out) != len(hits) {
		return fmt.Errorf("gateway: %d decisions for %d hits", len(out), len(hits))
	}
	switch op {
	case limiter.Release:
		return e.l.Release(ctx, hits)
	case limiter.Refund:
		return e.l.Refund(ctx, hits)
	}
	r := e.pool.Get().(*limiter.Result)
	defer e.pool.Put(r)
	var err error
	switch op {
	case limiter.Charge:
		err = e.l.CheckInto(ctx, hits, r)
	case limiter.Peek:
		err = e.l.PeekInto(ctx, hits, r)
	default:
		return fmt.Errorf("gateway: unknown op %d", op)
	}
	if err != nil {
		return err
	}
	copy(out, r.Decisions)
	return nil
}
