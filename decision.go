package floodgate

import "time"

// Decision is the answer to one check of one limit.
type Decision struct {
	// Allowed reports whether the request may pass (after Delay, if any).
	Allowed bool
	// Limit is the capacity of the limit in units.
	Limit int64
	// Remaining is the number of whole units admissible now, after charging.
	Remaining int64
	// RetryAfter is, on a denial, the earliest wait after which the same
	// cost passes with no other traffic. It is 0 when Allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to full (or idle).
	ResetAfter time.Duration
	// Delay is how long to hold an allowed request before forwarding it
	// (the leaky queue); 0 for every other algorithm.
	Delay time.Duration
	// Overrun is, for a reservation settled above its estimate, the units
	// of the excess the limit could not take because it ran out: they were
	// not charged (a limit never goes below zero credit). It is 0 for
	// every other decision.
	Overrun int64
	// At is the instant the store decided at, in Unix nanoseconds, for
	// stores that say (the memory store does; 0 otherwise): what an access
	// log records, so that a replay decides at the same instant.
	At int64
	// Mark is, for a charge of a window, a sliding log or a quota, where
	// the store counted it: the instant of the charge in Unix nanoseconds
	// on the store's own clock (memstore's timeline, the Redis server's).
	// It is 0 for other stores, other algorithms, a peek, a check or a
	// charge that did not go ahead. A refund names it (limiter.Hit.Mark)
	// to give back exactly that charge, from the window, log entry or
	// period that holds it, if that still counts.
	Mark int64
}
