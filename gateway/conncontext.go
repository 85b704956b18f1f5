package gateway

import (
	"context"
	"net"
)

// connKey is the context key of a request's client connection
// (ConnContext).
type connKey struct{}

// ConnContext returns ctx holding c, the connection a request came on.
// Set it as http.Server.ConnContext so that the gateway's net/http engine
// can watch the connection for the client leaving (a request that waits
// for its place in a queue, an answer that streams): net/http stops
// noticing a client's end once the client sent a byte past its request (a
// pipelined request, a body), and the gateway then looks at the socket
// itself, without reading it. Without it the request's context alone
// tells.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// connOf returns the connection ConnContext put in ctx, nil when none.
func connOf(ctx context.Context) net.Conn {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	return c
}
