package edge

import (
	"context"
	"crypto/tls"
	"time"
)

// A listener that speaks TLS (the gateway's server.tls) hands the engine
// *tls.Conn connections. The handshake is made before the first bytes are
// sniffed, bounded by ReadHeaderTimeout; a connection whose client chose
// HTTP/2 by ALPN goes to the fallback server whole, as a *tls.Conn, so
// that net/http serves it as HTTP/2 over TLS (with prior knowledge on a
// plain connection it is h2c). HTTP/1.1 stays on the edge engine.

// handshake completes a TLS connection's handshake and reports whether
// its client chose HTTP/2.
func (e *Engine) handshake(tc *tls.Conn) (h2 bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.header)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return false, err
	}
	_ = tc.SetDeadline(time.Time{})
	return tc.ConnectionState().NegotiatedProtocol == "h2", nil
}

// routeTLS takes ec, a TLS connection (tc), through its handshake: it
// reports whether the edge engine serves it, else it was handed over
// (HTTP/2) or closed.
func (e *Engine) routeTLS(ec *conn, tc *tls.Conn) bool {
	h2, err := e.handshake(tc)
	switch {
	case err != nil:
		ec.Close()
	case h2 && e.fallback != nil:
		e.handOver(ec, tc)
	case h2:
		ec.Close()
	default:
		ec.tls = true
		return true
	}
	return false
}
