package edge

import (
	"crypto/tls"

	"github.com/floodgate/floodgate/gateway"
)

// upstreamTLS is the client TLS configuration of a pool's targets: the
// route's upstream_tls, else the gateway's (server.upstream.tls), else nil
// (the system's CAs).
func upstreamTLS(def *tls.Config, pool *gateway.Pool) *tls.Config {
	if pool != nil && pool.TLS() != nil {
		return pool.TLS()
	}
	return def
}
