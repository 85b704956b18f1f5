// Package gateway puts Floodgate in front of HTTP: a net/http middleware that
// any service can wrap its handler with, the reverse proxy behind
// "floodgate serve", and the answers clients can act on.
//
// The gateway is one front end of the engine (package limiter), like the
// Envoy rate-limit service and the HTTP check API: a Matcher turns each
// request into hits (PolicyMatcher: the route and every limit that applies,
// with the client's identity resolved through package identity), the engine
// decides them all at once, and the gateway turns the engine's Result into
// the answer. It either forwards the request (after holding it for its slot
// when a leaky queue shapes it) or answers:
//
//   - 429 {"message":"Too Many Requests"} when throttled, or
//     {"message":"Limit Exceeded"} when a quota is used up, with
//     Retry-After in whole seconds (rounded up, at least 1);
//   - 403 {"message":"Forbidden"} for a missing or unknown API key on a route
//     that requires one, and 401 for a token that does not verify when the
//     policy rejects those: after the limits that apply to the request
//     without the missing identity were charged, so that guessing is
//     throttled like anything else.
//   - 503 {"message":"Service Unavailable"} with Retry-After when the
//     route's overload control (its overload block: a cap on requests in
//     flight, fixed or adaptive, shared by criticality tiers, with a fair
//     queue of tenants) has no place for a request its limits allowed
//     (overload.go, docs/overload.md).
//
// A token is verified only when a limit the request matched counts per
// user, and only after the limits that do not allowed the request
// (UserMatcher), so a flood of forged tokens costs no signature checks
// beyond what the per-address limits let through.
//
// Every response that a limit covered carries the IETF RateLimit-Policy and
// RateLimit fields (package fields), the binding limit first. The legacy
// X-RateLimit-Limit/Remaining/Reset fields and a field naming the binding
// limit of a denial are behind switches. A request that waited, for its
// place in a leaky queue or in overload control's queue, goes on with
// fields that count from the moment its wait ended, not from its arrival
// (its resets that much nearer, a bucket refilled meanwhile, and a limit
// whose window ended meanwhile looked at again). Shadow limits add
// nothing and block nothing. Decisions are counted by the engine's
// Observer; the gateway's Observer takes only what the gateway alone sees
// (its own answers, upstream statuses, queue lengths).
//
// A Match's Refusal (or its binding limit's) changes how a 429 looks:
// its status (429 or 503), body, content type and extra header fields;
// its Forward says which identity headers the upstream is told, every
// copy a client sent removed first, and which credentials are stripped
// (upstreamid.go). With Options.Gatekeeper, each matched request is
// screened before any limit is charged (gatekeeper.go): an address on a
// deny list is answered 403, a key in the penalty box 429 with
// Retry-After until its ban ends, and an allowed network loses the hits
// of the limits it is exempt from; the gatekeeper is told how the
// requests it let through ended, to count offences.
//
// With Options.AccessLog, every request leaves one record (package
// accesslog), refused ones included: the client as resolved, the API key
// by its name, the user, the binding limit, the decision and the instant
// the store decided it at, so that a log can be replayed (package replay).
// Explain says how the gateway would answer a request, limit by limit,
// peeking at their state without charging anything.
//
// The reverse proxy, on either engine, answers itself what no upstream
// should get as a path, before any limit: CONNECT (405), OPTIONS * (200,
// as net/http's server does), another method on * (400) and a method
// longer than 32 bytes (501). A request with a chunked body has its
// connection closed after its answer.
//
// # Two HTTP engines, one request path
//
// The request path (handle and finish in gateway.go: target checks, method
// override, matching, the decision, the answer and its fields, leases and
// their renewal, the queue wait, reservations and their settle, overload
// control's place and its queue, the access record) reads a Request, a small engine-neutral view of the request
// (method, host, path, peer, header fields), and answers through an
// Exchange, a handful of methods each engine implements. A Matcher reads
// the same view; net/http users reach their *http.Request through
// Request.HTTP. An engine is a thin adapter: it fills the view and
// implements the exchange. An engine outside this package drives the flow
// through engine.go's few exported methods (Begin, Run, Finish, and the
// Recorder a Pass is given), so that importing the gateway for its
// middleware compiles no other HTTP engine.
//
//   - net/http (nethttp.go): Middleware and ServeHTTP, the reverse proxy on
//     httputil.ReverseProxy. It serves HTTP/1.1, HTTP/2 (h2c, and TLS with
//     ALPN for a server set up so) and upgraded connections (WebSocket).
//   - The edge engine (package gateway/edge, edge.New): HTTP/1.1 on
//     github.com/valyala/fasthttp, for "floodgate serve". Its view's strings
//     are views of fasthttp's buffers (no copy, no allocation); answers are
//     precomputed bodies; upstream connections are pooled and capped per
//     host (HostClient), small bodies are read whole and the rest (event
//     streams, chunked or large bodies) streamed as they come; request
//     bodies stream to the upstream as they arrive. What it cannot serve it
//     hands to a net/http server with the connection: a connection that
//     opens with HTTP/2's preface, a request that upgrades its connection,
//     and a first request whose head has a line ending in a bare LF. It
//     answers what it cannot read as net/http does (400, 431 for fields over
//     the limit, 501 for an unknown transfer coding, identity included, 505
//     for another HTTP version, 417 for an expectation other than
//     100-continue), and refuses field names that are not tokens, values
//     with control characters, targets with broken escapes and trailers
//     that hold framing or routing fields. It cannot tell that a client left while its request is
//     with the upstream (fasthttp does not read the connection meanwhile):
//     a request waiting in a queue watches its connection, but an upstream
//     call runs to its end and the answer is then dropped.
package gateway
