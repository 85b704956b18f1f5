package limiter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestNilArgumentsAreErrors: an engine made without a store, and a nil
// Request, Result or rule handed to it, are the caller's mistakes. Every
// verb says so with an error, and none panics or decides anything (an
// engine without a store must not fall back to failure policies, which
// would allow every request of a FailOpen rule).
func TestNilArgumentsAreErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := window(t, "open", 10, floodgate.FailOpen)
	hits := func() []limiter.Hit { return []limiter.Hit{{Rule: open, Key: "k", Cost: 1}} }
	reserved := func() *limiter.Request {
		return &limiter.Request{Hits: []limiter.Hit{{Rule: open, Key: "k", Cost: 1, Reserve: true}}, Reservation: 7}
	}
	noStore := limiter.New(nil, limiter.Options{})
	engine := limiter.New(newMem(t), limiter.Options{})
	var res limiter.Result
	for _, c := range []struct {
		name string
		call func() error
		want error
	}{
		{"Check without a store", func() error {
			r, err := noStore.Check(ctx, hits())
			if r.Allowed {
				t.Errorf("Check without a store allowed: %+v", r)
			}
			return err
		}, limiter.ErrNoStore},
		{"Peek without a store", func() error { _, err := noStore.Peek(ctx, hits()); return err }, limiter.ErrNoStore},
		{"Decide without a store", func() error { return noStore.Decide(ctx, reserved(), &res) }, limiter.ErrNoStore},
		{"Settle without a store", func() error { return noStore.Settle(ctx, reserved(), []int64{1}, &res) }, limiter.ErrNoStore},
		{"Release without a store", func() error { return noStore.Release(ctx, hits()) }, limiter.ErrNoStore},
		{"Renew without a store", func() error { return noStore.Renew(ctx, hits()) }, limiter.ErrNoStore},
		{"Refund without a store", func() error { return noStore.Refund(ctx, hits()) }, limiter.ErrNoStore},
		{"Decide of a nil Request", func() error { return engine.Decide(ctx, nil, &res) }, nil},
		{"Decide into a nil Result", func() error { return engine.Decide(ctx, &limiter.Request{Hits: hits()}, nil) }, nil},
		{"Settle of a nil Request", func() error { return engine.Settle(ctx, nil, nil, &res) }, nil},
		{"Settle into a nil Result", func() error { return engine.Settle(ctx, reserved(), []int64{1}, nil) }, nil},
		{"SplitRule of a nil rule", func() error { _, err := limiter.SplitRule(nil, 2); return err }, nil},
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panic: %v", c.name, p)
				}
			}()
			err := c.call()
			switch {
			case err == nil:
				t.Errorf("%s: no error", c.name)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}()
	}
	// The engine with a store was not charged by the calls it refused.
	if r, err := engine.Peek(ctx, hits()); err != nil || r.Decisions[0].Remaining != 9 {
		t.Errorf("after the refused calls: %+v %v, want a peek of 1 to leave 9 of 10", r, err)
	}
}
