package floodgate

import "time"

// DefaultStoreTimeout is the deadline of one store call when none is
// configured (server.store_timeout, limiter.Options.Timeout): past it, each
// limit of the call follows its failure policy. It bounds how long a store
// outage can make a request wait.
const DefaultStoreTimeout = 5 * time.Millisecond

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
