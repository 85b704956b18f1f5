// Package identity works out who sent a request: the client's IP address
// (believing X-Forwarded-For or Forwarded only from trusted proxies), the
// key that address is counted under (IPv6 by prefix), and the user, from a
// verified JWT or from a header set by a trusted proxy.
//
// Nothing a client sends directly is trusted: a forwarded address is read
// right to left and only past hops that are themselves trusted proxies, and
// a token must verify with the one configured algorithm and key.
package identity
