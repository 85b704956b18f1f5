package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// fixed429 serves, on addr, every request with a fixed 429 the size of the
// edge engine's answer to a refused request (the same fields, the date
// included), from a fasthttp server set up as the edge engine sets up its
// own: the floor under the edge engine's 429 path.
func fixed429(addr string) error {
	body := []byte(`{"message":"Too Many Requests"}` + "\n")
	var (
		jsonType  = []byte("application/json")
		policy    = []byte("Ratelimit-Policy")
		policyV   = []byte(`"per-client";q=1;w=60`)
		rateLimit = []byte("Ratelimit")
		rateV     = []byte(`"per-client";r=0;t=60`)
		retry     = []byte("Retry-After")
		retryV    = []byte("60")
	)
	return serveFast(addr, func(ctx *fasthttp.RequestCtx) {
		r := &ctx.Response
		r.SetStatusCode(fasthttp.StatusTooManyRequests)
		r.Header.SetContentTypeBytes(jsonType)
		r.Header.SetCanonical(policy, policyV)
		r.Header.SetCanonical(rateLimit, rateV)
		r.Header.SetCanonical(retry, retryV)
		r.SetBodyRaw(body)
	})
}

// raw429 is the fixed 429, head and body, as the floors that write their
// answers themselves send it: the same fields and size as fixed429's (the
// Date is the one of the floor's start).
func raw429() []byte {
	body := `{"message":"Too Many Requests"}` + "\n"
	return []byte("HTTP/1.1 429 Too Many Requests\r\n" +
		"Date: " + time.Now().UTC().Format(http.TimeFormat) + "\r\n" +
		"Content-Type: application/json\r\n" +
		"Ratelimit-Policy: \"per-client\";q=1;w=60\r\n" +
		"Ratelimit: \"per-client\";r=0;t=60\r\n" +
		"Retry-After: 60\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// serveFast serves h on addr from a fasthttp server set up as the edge
// engine sets up its own (its buffers, timeouts and switches). Request
// bodies stream, as the edge engine's do: with ReduceMemoryUsage and
// without streaming, fasthttp gives its read buffer back after every
// request and reads the next one's first byte alone, a read system call
// more a request (0.3–0.6 µs of CPU on the 2-core test machine) that the
// edge engine does not make. The edge engine's per-request body deadline
// (HeaderReceived) is left out: its connections coalesce deadlines.
func serveFast(addr string, h fasthttp.RequestHandler) error {
	srv := &fasthttp.Server{
		Handler:                      h,
		ReadTimeout:                  10 * time.Second,
		IdleTimeout:                  120 * time.Second,
		ReadBufferSize:               64 << 10,
		WriteBufferSize:              4 << 10,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		ReduceMemoryUsage:            true,
		StreamRequestBody:            true,
		MaxRequestBodySize:           1,
		LazyRequestTime:              true,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "listening on", ln.Addr())
	return srv.Serve(ln)
}
