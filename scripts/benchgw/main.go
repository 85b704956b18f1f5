// Command benchgw is the bench script's helper: a trivial upstream, a bare
// reverse proxy (net/http/httputil with the same tuned transport as
// Floodgate's) to measure what Floodgate adds on top of proxying, a bare
// fasthttp server answering every request with the same 429 Floodgate's
// per-address limit answers (what the edge engine's 429 path costs without
// the gateway) and the same answer from a goroutine per connection over
// net.Conn with no HTTP library and from event loops of its own driving
// epoll, the gateway's flow for a policy file on those event loops with a
// head parser of their own and its answers written as bytes (the 429 path
// of an engine of the gateway's own), the same flow on a goroutine per
// connection forwarding what it passes with no HTTP library (the least a
// forwarding path of the edge engine's front would cost), three floors
// under the pass-through (a bare fasthttp proxy set up
// as the edge engine's, a goroutine per connection, event loops), and a
// client that holds idle keep-alive connections open, to measure what each
// costs a server.
//
//	benchgw upstream -addr 127.0.0.1:18101
//	benchgw proxy -addr 127.0.0.1:18102 -target http://127.0.0.1:18101
//	benchgw fixed429 -addr 127.0.0.1:18104
//	benchgw conn429 -addr 127.0.0.1:18108
//	benchgw loop429 -addr 127.0.0.1:18109
//	benchgw flowloop -addr 127.0.0.1:18110 -policy scripts/bench-gateway/reject.yaml
//	benchgw flowconn -addr 127.0.0.1:18111 -policy scripts/bench-gateway/pass.yaml
//	benchgw fastproxy -addr 127.0.0.1:18105 -target http://127.0.0.1:18101
//	benchgw connproxy -addr 127.0.0.1:18107 -target http://127.0.0.1:18101 [-deadlines 30s]
//	benchgw loopproxy -addr 127.0.0.1:18106 -target http://127.0.0.1:18101
//	benchgw idle -target http://127.0.0.1:18102/ -n 2000
//	benchgw tls -target https://127.0.0.1:18103/ -ca cert.pem -server-name bench.example -mode handshake
package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchgw:", err)
		os.Exit(2)
	}
}

// bufferPool lends the proxy its copy buffers (without one, ReverseProxy
// allocates 32 KiB per response); Floodgate's proxy does the same.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: benchgw upstream|proxy|fixed429|conn429|loop429|flowloop|flowconn|fastproxy|connproxy|loopproxy|idle|tls [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	target := fs.String("target", "", "upstream URL (proxy), or the server's URL (idle)")
	n := fs.Int("n", 1000, "connections to hold (idle)")
	tlsCA := fs.String("ca", "", "the server's CA certificate (tls)")
	tlsName := fs.String("server-name", "", "the server name asked for (tls)")
	tlsMode := fs.String("mode", "handshake", "handshake (a full handshake per connection) or request (HTTP/1.1 requests on kept-alive TLS connections) (tls)")
	tlsConns := fs.Int("c", 8, "concurrent clients (tls)")
	tlsDuration := fs.Duration("d", 5*time.Second, "how long to measure (tls)")
	policyFile := fs.String("policy", "", "the policy file whose gateway answers (flowloop, flowconn)")
	deadlines := fs.Duration("deadlines", 0, "a read and a write deadline this far ahead on both connections, set for every request (connproxy; 0: none)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "idle" {
		return holdIdle(*target, *n, *tlsCA, *tlsName)
	}
	if args[0] == "fixed429" {
		return fixed429(*addr)
	}
	if args[0] == "conn429" {
		return conn429(*addr)
	}
	if args[0] == "loop429" {
		return loop429(*addr)
	}
	if args[0] == "flowloop" {
		g, closeStore, err := policyGateway(*policyFile)
		if err != nil {
			return err
		}
		defer closeStore()
		return flowLoop(*addr, g)
	}
	if args[0] == "flowconn" {
		g, closeStore, err := policyGateway(*policyFile)
		if err != nil {
			return err
		}
		defer closeStore()
		return flowConns(*addr, g)
	}
	if args[0] == "fastproxy" {
		return fastProxy(*addr, *target)
	}
	if args[0] == "connproxy" {
		return connProxy(*addr, *target, *deadlines)
	}
	if args[0] == "loopproxy" {
		return loopProxy(*addr, *target)
	}
	if args[0] == "tls" {
		return benchTLS(*target, *tlsCA, *tlsName, *tlsMode, *tlsConns, *tlsDuration)
	}
	var h http.Handler
	switch args[0] {
	case "upstream":
		body := []byte(`{"ok":true}` + "\n")
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{"application/json"}
			_, _ = w.Write(body)
		})
	case "proxy":
		u, err := url.Parse(*target)
		if err != nil || u.Host == "" {
			return fmt.Errorf("proxy needs -target http://host:port, got %q", *target)
		}
		dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
		h = &httputil.ReverseProxy{
			ErrorLog:   log.New(io.Discard, "", 0),
			BufferPool: &bufferPool{},
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(u)
				pr.SetXForwarded()
			},
			Transport: &http.Transport{
				DialContext:           dialer.DialContext,
				ForceAttemptHTTP2:     true,
				MaxIdleConns:          2048,
				MaxIdleConnsPerHost:   512,
				IdleConnTimeout:       90 * time.Second,
				TLSHandshakeTimeout:   5 * time.Second,
				ResponseHeaderTimeout: 30 * time.Second,
			},
		}
	default:
		return fmt.Errorf("unknown mode %q (want upstream or proxy)", args[0])
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	srv.SetKeepAlivesEnabled(true)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "listening on", ln.Addr())
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// holdIdle opens n connections to target, sends one request on each and
// reads its answer, so that each is an idle kept-alive connection, then
// prints "ready" and holds them until standard input is closed.
func holdIdle(target string, n int, caFile, serverName string) error {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("idle needs -target http://host:port/ or https://host:port/, got %q", target)
	}
	dial := func() (net.Conn, error) { return net.Dial("tcp", u.Host) }
	if u.Scheme == "https" {
		tc, err := clientTLS(caFile, serverName)
		if err != nil {
			return err
		}
		dial = func() (net.Conn, error) { return tls.Dial("tcp", u.Host, tc) }
	}
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	for range n {
		c, err := dial()
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
