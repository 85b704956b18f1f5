// Package h2guard bounds what one HTTP/2 connection can make a server do
// with frames that are not requests.
//
// Go's HTTP/2 server answers every PING and SETTINGS frame, takes every
// WINDOW_UPDATE, PRIORITY, empty DATA or CONTINUATION frame and every
// frame of an unknown type, and refuses every stream past those it takes
// at once and every DATA frame on a stream closed, as fast as a client
// sends them, for as long as the client reads the answers, and answers
// itself every request whose headers pass its bound (431) or hold a
// header HTTP/2 forbids (400): no limit on requests ever sees them. A Conn follows the frames a client sends and
// keeps a budget of those that are not requests, as nginx, Envoy and h2o
// do; past it the client is sent a GOAWAY with ENHANCE_YOUR_CALM and its
// connection is closed. A Cuts given to New or Install counts each
// connection cut by the kind of frame that spent most of its budget (a
// fixed few kinds, whatever the client sends) and logs it, at most one
// line a second.
//
// Install puts a net/http server's HTTP/2 connections (h2 over TLS, and
// h2c) through a Conn; the HTTP/2 server that serves them is still
// net/http's own. NewHandled makes a Conn for another server (grpc-go's),
// whose streams earn only when the server tells it, by Conn.Handled, that
// their call reached its handler.
package h2guard
