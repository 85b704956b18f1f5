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

// routeTLS takes a TLS connection through its handshake: it returns the
// connection for the edge engine to serve, or nil when the connection was
// handed over (HTTP/2) or closed.
func (e *Engine) routeTLS(tc *tls.Conn) *conn {
	h2, err := e.handshake(tc)
	switch {
	case err != nil:
		tc.Close()
	case h2 && e.fallback != nil:
		e.slow.push(tc)
	case h2:
		tc.Close()
	default:
		return &conn{Conn: tc, tls: true}
	}
	return nil
}
