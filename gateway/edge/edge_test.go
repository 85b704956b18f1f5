package edge

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/valyala/fasthttp"
)

// policyGateway is a gateway of the policy file src over an embedded
// store.
func policyGateway(tb testing.TB, src string) *gateway.Gateway {
	tb.Helper()
	return policyGatewayWith(tb, src, gateway.TransportOptions{})
}

// policyGatewayWith is policyGateway with the upstream options up.
func policyGatewayWith(tb testing.TB, src string, up gateway.TransportOptions) *gateway.Gateway {
	tb.Helper()
	f, err := config.Parse("bench.yaml", []byte(src))
	if err != nil {
		tb.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		tb.Fatal(err)
	}
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, limiter.Options{}), Upstream: up})
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// benchEdge runs requests through the edge engine's handler in process
// (no connection), from parallel goroutines.
func benchEdge(b *testing.B, g *gateway.Gateway, wantCode int, path string) {
	e := New(g, Options{})
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}
	var warm fasthttp.RequestCtx
	var req fasthttp.Request
	req.SetRequestURI(path)
	req.Header.SetHost("gateway.example")
	warm.Init(&req, addr, nil)
	e.serve(&warm) // spends what a limit lets through first
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var req fasthttp.Request
		req.Header.SetMethod("GET")
		req.SetRequestURI(path)
		req.Header.SetHost("gateway.example")
		req.Header.Set("User-Agent", "bench")
		// A connection of the engine, as fasthttp hands it to the
		// handler, request after request.
		var ctx fasthttp.RequestCtx
		ctx.Init2(&conn{Conn: benchConn{addr}, send: e.send, p: e.parker}, nil, true)
		for pb.Next() {
			req.CopyTo(&ctx.Request)
			ctx.Response.Reset()
			e.serve(&ctx)
			if code := ctx.Response.StatusCode(); code != wantCode {
				b.Fatalf("status %d, want %d", code, wantCode)
			}
		}
	})
}

// benchConn is a connection that only has addresses.
type benchConn struct{ addr net.Addr }

func (c benchConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c benchConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c benchConn) Close() error                     { return nil }
func (c benchConn) LocalAddr() net.Addr              { return c.addr }
func (c benchConn) RemoteAddr() net.Addr             { return c.addr }
func (c benchConn) SetDeadline(time.Time) error      { return nil }
func (c benchConn) SetReadDeadline(time.Time) error  { return nil }
func (c benchConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkEdgeReject: the edge engine's 429 path through a policy file,
// without the connection.
func BenchmarkEdgeReject(b *testing.B) {
	benchEdge(b, policyGateway(b, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: http://127.0.0.1:9}
limits:
  - {name: tiny, rate: 1, per: 1m, burst: 1, key: global, scope: global}
  - {name: per-ip, rate: 1000000, burst: 1000000, key: client_ip, scope: global}
`), 429, "/x")
}

// BenchmarkEdgeRewrite: what the edge engine's proxy does to the fields of
// a request on its way upstream and of the response on its way back.
func BenchmarkEdgeRewrite(b *testing.B) {
	u, _ := url.Parse("http://127.0.0.1:9")
	up := &upstream{host: u.Host}
	v := &gateway.Request{Peer: netip.MustParseAddr("192.0.2.1")}
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	req.SetRequestURI("/x")
	req.Header.SetHost("gateway.example")
	req.Header.Set("User-Agent", "bench")
	req.Header.Set("Accept", "*/*")
	var resp fasthttp.Response
	resp.Header.SetStatusCode(200)
	resp.Header.Set("Server", "up")
	resp.Header.SetContentType("application/json")
	resp.Header.Set("Connection", "keep-alive")
	resp.SetBody([]byte(`{"ok":true}`))
	var ctx fasthttp.RequestCtx
	ctx.Init2(&conn{Conn: benchConn{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}}}, nil, true)
	b.ReportAllocs()
	for b.Loop() {
		req.CopyTo(&ctx.Request)
		rewriteRequest(&ctx, up, v, false)
		resp.CopyTo(&ctx.Response)
		stripHopResponse(&ctx.Response.Header)
	}
}

// BenchmarkEdgeAdmit: the checks the edge engine makes of a request before
// its request path (preflight, escapes, Expect, transfer codings), on a
// request parsed from the wire as a browser sends it.
func BenchmarkEdgeAdmit(b *testing.B) {
	raw := "GET /students/9?x=%20y HTTP/1.1\r\nHost: gateway.example\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
		"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en-GB,en;q=0.9\r\nAccept-Encoding: gzip, deflate\r\n" +
		"Cookie: session=abc123\r\nX-Api-Key: key-partner-1\r\nConnection: keep-alive\r\n\r\n"
	var ctx fasthttp.RequestCtx
	if err := ctx.Request.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	e := &Engine{}
	b.ReportAllocs()
	for b.Loop() {
		if !e.admit(&ctx, false) {
			b.Fatal("refused")
		}
	}
}

// TestH2Start: the edge engine tells HTTP/2's preface from HTTP/1 whether
// its first read holds part of the preface, all of it, or more.
func TestH2Start(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		b    string
		want bool
	}{
		{"PRI", true}, {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", true}, {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04", true},
		{"GET / HTTP/1.1\r\n", false}, {"PRX", false}, {"", true},
	} {
		if got := h2Start([]byte(c.b)); got != c.want {
			t.Errorf("h2Start(%q) = %v, want %v", c.b, got, c.want)
		}
	}
}

// TestShutdownClosesUpstreamConns: once the engine is shut down, the
// connections it kept open to an upstream are closed, not left idle until
// their idle timeout.
func TestShutdownClosesUpstreamConns(t *testing.T) {
	t.Parallel()
	var open atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	up.Start()
	defer up.Close()
	g := policyGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: `+up.URL+`}
limits:
  - {name: roomy, rate: 1000000, burst: 1000000, key: global, scope: global}
`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := New(g, Options{})
	done := make(chan error, 1)
	go func() { done <- e.Serve(ln) }()
	res, err := http.Get("http://" + ln.Addr().String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", res.StatusCode)
	}
	if n := open.Load(); n != 1 {
		t.Fatalf("%d connections open to the upstream, want 1", n)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the upstream still open after Shutdown", open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNextRequestDuringTheAnswer: a client that sends its next request
// while the one before is being answered (pipelining, at random moments
// from before the first is read to after its answer is written) has both
// answered: the engine's read after an answer misses no bytes that came
// before it began (a read that waited for new bytes without first trying
// the socket, after a reset of its readiness, would). Parking is off, so a
// missed request would wait for bytes that never come.
func TestNextRequestDuringTheAnswer(t *testing.T) {
	t.Parallel()
	g := echoGateway(t, echoPath, "")
	e := New(g, Options{ParkIdleAfter: -1})
	addr, stop := serveOn(t, e)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for j := range 15 {
				if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
					errs <- err
					return
				}
				first := fmt.Sprintf("GET /%d/%d/a HTTP/1.1\r\nHost: gateway.example\r\n\r\n", i, j)
				next := fmt.Sprintf("GET /%d/%d/b HTTP/1.1\r\nHost: gateway.example\r\n\r\n", i, j)
				if _, err := io.WriteString(c, first); err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(rng.IntN(600)) * time.Microsecond)
				if _, err := io.WriteString(c, next); err != nil {
					errs <- err
					return
				}
				for _, want := range []string{fmt.Sprintf("up /%d/%d/a", i, j), fmt.Sprintf("up /%d/%d/b", i, j)} {
					res, err := http.ReadResponse(br, nil)
					if err != nil {
						errs <- fmt.Errorf("connection %d, pair %d, waiting for %q: %w", i, j, want, err)
						return
					}
					body, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil || res.StatusCode != http.StatusOK || string(body) != want {
						errs <- fmt.Errorf("connection %d, pair %d: %d %q (%v), want 200 %q", i, j, res.StatusCode, body, err, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// FuzzHostOf: the host a request is routed by is the one fasthttp's
// ctx.Host() reads, whatever the target and Host field, on the first
// request of a connection and on the next, when fasthttp reads a host it
// parsed before from memory.
func FuzzHostOf(f *testing.F) {
	for _, s := range [][2]string{
		{"/x", "gateway.example"}, {"/", "gateway.example:8080"}, {"/x", "Gateway.Example"},
		{"/x", "ex%61mple.com"}, {"/x", "[::1]:80"}, {"/x", "a:1:2"}, {"/x", "a:b"}, {"/x", "a:"},
		{"//x/y", "gateway.example"}, {"http://other.example/x", "gateway.example"},
		{"http://OTHER.example:81/x?y", "gateway.example"}, {"/x", ""}, {"/a/../b", "h-1.example"},
		{"/x", "user@host"}, {"/x", "ho_st"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, target, host string) {
		raw := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
		var want fasthttp.RequestCtx
		if err := want.Request.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Skip()
		}
		var ctx fasthttp.RequestCtx
		for i := range 2 {
			ctx.Request.Reset()
			if err := ctx.Request.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatal(err)
			}
			w := string(want.Host())
			if got := string(hostOf(&ctx)); got != w {
				t.Fatalf("request %d: target %q, Host %q: host %q, fasthttp reads %q", i+1, target, host, got, w)
			}
			_ = ctx.Host() // what fasthttp keeps of it for the next request
		}
	})
}
