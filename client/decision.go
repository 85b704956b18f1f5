package client

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Decision is the service's answer to one check.
type Decision struct {
	// Allowed reports whether the call may go ahead (and was charged).
	Allowed bool
	// Limit is the capacity of the binding limit, when the service said.
	Limit int64
	// Remaining is the number of units still admissible now.
	Remaining int64
	// RetryAfter is, on a denial, how long to wait before the same cost
	// can pass. It is 0 when Allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the binding limit is back to full.
	ResetAfter time.Duration
	// Delay is, when Allowed, how long the call is to be held before it
	// goes ahead: its place in a leaky queue (NGINX limit_req's delay),
	// for which the service has charged it. Wait holds it that long.
	Delay time.Duration
	// Binding names the limit that decided (the first denying one).
	Binding string
}

// ErrNeverFits reports that the service said the cost can never pass (it
// exceeds the limit's capacity); waiting does not help.
var ErrNeverFits = errors.New("client: cost exceeds the limit's capacity and can never pass")

// ErrInvalidHit reports a hit that cannot be sent as it is: its limit
// name or key is not valid UTF-8, which JSON would carry with U+FFFD in
// place of each bad byte, so that distinct keys would share a counter.
var ErrInvalidHit = errors.New("client: invalid hit")

// ErrStatus reports an answer the client could not use (a 4xx or 5xx other
// than the decision itself). Use errors.As with *StatusError for details.
var ErrStatus = errors.New("client: unexpected answer")

// StatusError is an HTTP answer that is not a decision.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Message is the service's error message, if it sent one.
	Message string
}

// Error describes the answer.
func (e *StatusError) Error() string {
	if e.Message == "" {
		return "client: unexpected HTTP status " + strconv.Itoa(e.Code)
	}
	return "client: HTTP " + strconv.Itoa(e.Code) + ": " + e.Message
}

// Unwrap lets errors.Is(err, ErrStatus) match.
func (e *StatusError) Unwrap() error { return ErrStatus }

// CheckFunc asks a limit once: it returns the decision for one attempt,
// charging the limit when the attempt is allowed.
type CheckFunc func(ctx context.Context) (Decision, error)
