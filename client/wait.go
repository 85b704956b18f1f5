package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// WaitOptions tune Wait. The zero value is usable.
type WaitOptions struct {
	// Jitter is the largest extra sleep added to each RetryAfter, drawn
	// uniformly, so that callers denied together do not all come back at
	// the same instant. Zero means 10% of the RetryAfter, at least 5ms.
	Jitter time.Duration
	// MinSleep is the sleep between two attempts when the service denies
	// without a RetryAfter. Zero means 50ms.
	MinSleep time.Duration
	// OnDenied, when set, is called after each denial with the decision
	// and the sleep chosen before the next attempt.
	OnDenied func(d Decision, sleep time.Duration)
}

// Wait calls check until it allows, sleeping between attempts for the
// RetryAfter the service gave plus jitter. It returns the allowing
// decision, or ctx's error when ctx ends first (checked before every
// attempt and while sleeping), or the first error check returns:
// ErrNeverFits means no amount of waiting helps.
//
// Wait never sleeps past ctx's deadline only to fail: when the next
// attempt cannot happen before the deadline it returns
// context.DeadlineExceeded at once.
//
// An allowing decision with a Delay (a leaky queue's place) is held that
// long before Wait returns it, so that callers let through together go
// ahead spaced at the queue's rate. The charge stands: when ctx ends
// while it is held, or its deadline comes before the Delay ends (then at
// once), Wait returns the decision with ctx's error.
func Wait(ctx context.Context, check CheckFunc, opts WaitOptions) (Decision, error) {
	minSleep := opts.MinSleep
	if minSleep <= 0 {
		minSleep = 50 * time.Millisecond
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		d, err := check(ctx)
		if err != nil {
			return d, err
		}
		if d.Allowed {
			return d, hold(ctx, d.Delay)
		}
		sleep := d.RetryAfter
		if sleep <= 0 {
			sleep = minSleep
		}
		sleep = addSat(sleep, jitter(sleep, opts.Jitter))
		if opts.OnDenied != nil {
			opts.OnDenied(d, sleep)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < sleep {
			return d, fmt.Errorf("client: wait: next attempt in %s is past the deadline: %w",
				sleep, context.DeadlineExceeded)
		}
		if timer == nil {
			timer = time.NewTimer(sleep)
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-timer.C:
		}
	}
}

// hold waits out an allowed call's delay, or returns ctx's error when ctx
// ends first (at once when its deadline comes before the delay ends).
func hold(ctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < delay {
		return fmt.Errorf("client: wait: allowed after a delay of %s, past the deadline: %w",
			delay, context.DeadlineExceeded)
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// jitter draws the extra sleep added to base.
func jitter(base, max time.Duration) time.Duration {
	if max <= 0 {
		max = base / 10
		if max < 5*time.Millisecond {
			max = 5 * time.Millisecond
		}
	}
	return rand.N(max)
}

// errNeverFits wraps ErrNeverFits with the service's message.
func errNeverFits(msg string) error {
	if msg == "" {
		return ErrNeverFits
	}
	return fmt.Errorf("%w (%s)", ErrNeverFits, msg)
}
