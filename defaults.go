package floodgate

import "time"

// DefaultStoreTimeout is the deadline of one store call when none is
// configured (server.store_timeout, limiter.Options.Timeout): past it, each
// limit of the call follows its failure policy. For a store judged by its
// progress (the Redis store, limiter.ReplyClock) a call fails at it only
// when no reply at all arrived on the call's connection for that long; a
// call behind replies that keep coming waits up to
// DefaultStoreHardTimeout. It bounds how long a store outage can make a
// request wait, and it must not be reached by a healthy store under load,
// or decisions degrade while the store is fine. On a 2-core machine at
// load average 8, Redis decisions through the engine at 64 to 256 callers
// (2 to 4 times the saturating load) took up to 51–94 ms at the 99.9th
// percentile and 126–134 ms at most; 5 ms, the old default, sent most
// decisions of a busy but healthy Redis to the failure policy. 250 ms
// leaves about twice the worst seen.
const DefaultStoreTimeout = 250 * time.Millisecond

// DefaultStoreHardTimeout bounds a store call that outlasts
// DefaultStoreTimeout while the store keeps answering (limiter.Options.
// HardTimeout): a store judged by its progress (the Redis store) fails a
// call at the store timeout only when no reply at all arrived on the
// call's connection for that long; a call behind replies that keep coming
// (a busy Redis, or this process waiting for CPU) waits up to this long.
const DefaultStoreHardTimeout = 2 * time.Second

// Defaults of the gateway's calls to upstreams (server.upstream in the
// policy file, gateway.TransportOptions), here so that the file's defaults
// and the transport's are one set.
const (
	// DefaultUpstreamTimeout bounds the wait for an upstream's response
	// headers once the request is sent.
	DefaultUpstreamTimeout = 30 * time.Second
	// DefaultUpstreamDialTimeout bounds connecting to an upstream.
	DefaultUpstreamDialTimeout = 5 * time.Second
	// DefaultUpstreamIdleTimeout closes upstream connections idle this
	// long.
	DefaultUpstreamIdleTimeout = 90 * time.Second
	// UpstreamHeadBytes bounds the head of an upstream's answer (its
	// status line and fields), as the gateway bounds a client's request
	// head: past it the request is answered 502, on each engine.
	UpstreamHeadBytes = 64 << 10
	// DefaultDrainTimeout bounds how long the gateway reads the rest of an
	// upstream's answer after the client left, to learn the actual cost of
	// a reservation (an LLM stream's final usage event); past it the
	// reservation keeps its estimate.
	DefaultDrainTimeout = 60 * time.Second
	// DefaultDrainBytes bounds the bytes read (and discarded) so.
	DefaultDrainBytes = 64 << 20
	// DefaultSendTimeout bounds how long one write of an answer may wait
	// for its client to take it (NGINX's send_timeout): past it the client
	// is taken to have left, as if it had reset its stream or connection.
	DefaultSendTimeout = 60 * time.Second

	// DefaultMaxKeyBytes caps a counter key's length in every store: a
	// longer key is counted under its SHA-256.
	DefaultMaxKeyBytes = 256
)

// Reservations (a cost known only after the request: limiter.Request.TTL,
// the policy file's reserve_ttl, the HTTP API's ttl).
const (
	// DefaultReservationTTL is how long a reservation is held when none is
	// given: a reservation not settled by then settles at its estimate.
	DefaultReservationTTL = 5 * time.Minute
	// MaxReservationTTL caps a reservation's lifetime, so that the records
	// a store keeps for reservations in flight stay bounded.
	MaxReservationTTL = 24 * time.Hour
)
