// Package identity works out who sent a request: the client's IP address
// (believing X-Forwarded-For or Forwarded only from trusted proxies), the
// key that address is counted under (IPv6 by prefix), and the user, from a
// verified JWT or from a header set by a trusted proxy.
//
// Nothing a client sends directly is trusted: a forwarded address is read
// right to left and only past hops that are themselves trusted proxies, and
// a token must verify with the one configured algorithm and key.
//
// A forwarded hop that is not one plain address (0xcb.0.113.81 and the
// other forms inet_aton reads, "unknown", obfuscated identifiers, zones,
// garbage) ends the trusted chain there, as NGINX's realip and Envoy's XFF
// handling do. The client is then unknown: Identity.ClientIP is the zero
// Addr, and it is counted as "unknown@" and the key of the trusted proxy
// that reported the hop (UnknownClientKey). Every such client of one proxy
// shares that counter, which is neither the proxy's own (a proxy's own
// requests are not spent by what it failed to name) nor the hop's text (a
// client cannot vary it to escape its limits). In Forwarded, elements and
// their parameters are cut only outside quoted strings, so that a value a
// proxy copied from the client (host="...") stays one value, and an
// element that names two clients (for= twice) is unreadable.
//
// Resolving a request costs no cryptography until a token must be
// verified: Resolver.Client works out the client, Resolver.Token reads the
// token a request presents, and Resolver.User verifies it only when a
// caller needs the user (the gateway asks only when a limit the request
// matched counts per user). A token that verified is remembered until it
// expires, so a client sending it again costs a map lookup; a token that
// does not verify gives a TokenError whose Reason (malformed, signature,
// expired ...) metrics count.
//
// A request is read through its *http.Request (Client, Token) or, for an
// HTTP engine other than net/http, through its peer's address and a Header
// view of its fields (ClientOf, TokenOf; ClientOfPeer for an engine that
// keeps its peer's text per connection); http.Header is a Header.
package identity
