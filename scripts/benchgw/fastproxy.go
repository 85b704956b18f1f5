package main

import (
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
	host, err := targetHost("fastproxy", target)
	if err != nil {
		return err
	}
	hc := &fasthttp.HostClient{
		Addr:                host,
		MaxConns:            1 << 20,
		MaxIdleConnDuration: 90 * time.Second,
		ReadTimeout:         30 * time.Second,
		ReadBufferSize:      16 << 10,
		WriteBufferSize:     16 << 10,
		ConnPoolStrategy:    fasthttp.LIFO,
	}
	return serveFast(addr, func(ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.Del("Connection")
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Response.Reset()
			ctx.SetStatusCode(fasthttp.StatusBadGateway)
			return
		}
		ctx.Response.Header.Del("Connection")
	})
}
