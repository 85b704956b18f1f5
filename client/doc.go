// Package client is the caller's side of Floodgate's decision service.
//
// HTTP asks the HTTP check API (package httpapi) and GRPC asks the Envoy
// RLS v3 service (package rls); both answer a Decision. Wait blocks until a
// distributed limit lets one more call through, sleeping for the
// RetryAfter the service gives plus a little jitter, so that outbound calls
// to a paid provider (SMS, e-mail, an AI model) stay within the provider's
// limit across every process that shares the limit. A call a leaky queue
// lets through with a Delay (its place in the queue) is held that long
// before Wait returns; a caller of Check holds it itself.
//
// HTTP.Reserve is for calls whose cost is known only afterwards (the
// tokens of a completion): it reserves an estimate, and the Reservation's
// Settle charges the actual cost (giving back the difference, or charging
// the excess as far as the limits allow and reporting the overrun);
// Cancel gives it all back. Envoy's RLS has no settle; ExampleGRPC_CheckN
// shows the pattern it allows (the estimate as hits_addend before the
// call, the excess in a second call).
//
// RetryTransport is an http.RoundTripper for the other direction: when a
// server answers 429 or 503 it waits for the Retry-After the server sent
// (or a capped exponential backoff with full jitter when there is none)
// and tries again, a bounded number of times, and never retries a request
// whose body cannot be sent again. RetryInterceptor does the same for
// gRPC calls refused with a google.rpc.RetryInfo.
//
// Both take three optional guards, each shared by every request to the
// same servers: a Pacer holds requests back before they are sent while
// the server's RateLimit fields (or a Retry-After, or a RetryInfo) say
// that nothing is left, so that a client slows down before it is refused;
// an AdaptiveThrottle rejects requests locally as the backend refuses
// more of them (the SRE book's client-side throttling, with its K); a
// RetryBudget keeps retries within a share of the requests. Each counts
// what it held back. docs/client.md in the repository shows them at
// work.
package client
