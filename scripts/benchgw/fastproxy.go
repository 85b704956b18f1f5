package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/valyala/fasthttp"
)

// fastProxy passes every request, on addr, to target with a bare fasthttp
// server and HostClient set up as the edge engine sets up its own (buffer
// sizes, timeouts, a LIFO pool), doing nothing else a gateway does: no
// route, no limit, no fields, no rewriting but the Connection field. The
// floor under the edge engine's pass-through while it is built on
// fasthttp.
func fastProxy(addr, target string) error {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("fastproxy: target %q: want http://host:port", target)
	}
	hc := &fasthttp.HostClient{
		Addr:                u.Host,
		MaxConns:            1 << 20,
		MaxIdleConnDuration: 90 * time.Second,
		ReadTimeout:         30 * time.Second,
		ReadBufferSize:      16 << 10,
		WriteBufferSize:     16 << 10,
		ConnPoolStrategy:    fasthttp.LIFO,
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Request.Header.Del("Connection")
			if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Response.Reset()
				ctx.SetStatusCode(fasthttp.StatusBadGateway)
				return
			}
			ctx.Response.Header.Del("Connection")
		},
		ReadTimeout:                  10 * time.Second,
		IdleTimeout:                  120 * time.Second,
		ReadBufferSize:               64 << 10,
		WriteBufferSize:              4 << 10,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		ReduceMemoryUsage:            true,
		LazyRequestTime:              true,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "listening on", ln.Addr())
	return srv.Serve(ln)
}
