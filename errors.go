package floodgate

import "errors"

// Sentinel errors returned by algorithms, stores and the engine. Callers test
// for them with errors.Is.
var (
	// ErrInvalidCost reports a cost below 1. Peeking is its own operation.
	ErrInvalidCost = errors.New("floodgate: cost must be at least 1")
	// ErrTimeBackwards reports a decision asked for at an instant before one
	// already seen for the same state. Pure algorithms reject it; stores and
	// the engine, which read clocks, clamp instead.
	ErrTimeBackwards = errors.New("floodgate: time went backwards")
	// ErrNeverFits reports a cost larger than the limit's capacity: such a
	// request can never pass, so no RetryAfter is given.
	ErrNeverFits = errors.New("floodgate: cost exceeds capacity and can never pass")
	// ErrInvalidLimit reports a limit whose parameters make no sense.
	ErrInvalidLimit = errors.New("floodgate: invalid limit")
)
