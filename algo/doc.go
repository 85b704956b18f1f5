// Package algo holds Floodgate's rate-limiting algorithms as pure state
// machines: every decision takes the state, the instant (Unix nanoseconds)
// and the cost, and returns a floodgate.Decision. Nothing here reads a clock,
// allocates per decision or does I/O.
package algo
