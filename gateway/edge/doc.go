// Package edge is the gateway's edge engine: an HTTP/1.1 reverse proxy on
// github.com/valyala/fasthttp that decides every request through the same
// admission flow as the net/http engine (gateway.Gateway.Run), answering
// from precomputed bodies and forwarding over pooled upstream connections
// capped per host. A plain connection's plain requests (a GET of HTTP/1.1
// without a body) are read by a loop of the engine's own before
// fasthttp's, which writes the gateway's own answers (a refusal) itself;
// the rest go on as on fasthttp (front.go). What it does not serve itself
// it hands to a net/http server (Options.Fallback): connections that open
// with HTTP/2's preface (h2c), requests whose lines end in a bare LF, and
// requests that upgrade their connection (WebSocket).
//
// It lives apart from package gateway so that a program that imports the
// gateway for its net/http middleware compiles no fasthttp:
//
//	e := edge.New(g, edge.Options{Fallback: &http.Server{Handler: g}})
//	err := e.Serve(listener)
//
// docs/engines.md compares the two engines, and lists where they answer a
// malformed request differently.
package edge
