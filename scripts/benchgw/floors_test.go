package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// dialFloor connects to the floor name starting on addr, waiting for it
// to listen (errc tells its end), with a deadline for the test's
// exchanges.
func dialFloor(t *testing.T, name, addr string, errc <-chan error) net.Conn {
	t.Helper()
	var err error
	for i := 0; i < 100; i++ {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			return c
		}
		select {
		case err := <-errc:
			t.Fatalf("%s: %v", name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s: %v", name, err)
	return nil
}

// TestFloorsPassRequests checks that both floors under the pass-through
// pass kept-alive requests to a real upstream and its answers back whole,
// so that what the bench measures is a proxy.
func TestFloorsPassRequests(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s", r.URL.Path)
	}))
	defer up.Close()
	floors := map[string]func(addr, target string) error{
		"fastproxy": fastProxy,
		"connproxy": func(addr, target string) error { return connProxy(addr, target, 0) },
		"connproxy with deadlines": func(addr, target string) error {
			return connProxy(addr, target, 30*time.Second)
		},
	}
	if runtime.GOOS == "linux" {
		floors["loopproxy"] = loopProxy
	}
	for name, serve := range floors {
		t.Run(name, func(t *testing.T) {
			addr := freeAddr(t)
			errc := make(chan error, 1)
			go func() { errc <- serve(addr, up.URL) }()
			c := dialFloor(t, name, addr, errc)
			defer c.Close()
			br := bufio.NewReader(c)
			for i := 0; i < 3; i++ {
				path := fmt.Sprintf("/r%d", i)
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n", path)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(body) != "path="+path {
					t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, body, err)
				}
			}
		})
	}
}

// TestConnProxyDeadlines checks that the goroutine floor with deadlines
// sets them: a client that sends nothing has its connection closed once the
// read deadline passes, and one without deadlines keeps it.
func TestConnProxyDeadlines(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	for _, d := range []time.Duration{0, 100 * time.Millisecond} {
		addr := freeAddr(t)
		errc := make(chan error, 1)
		go func() { errc <- connProxy(addr, up.URL, d) }()
		c := dialFloor(t, "connproxy", addr, errc)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		timedOut := errors.As(err, &ne) && ne.Timeout()
		if d > 0 && (n != 0 || timedOut || err == nil) {
			t.Errorf("deadlines %v: read %d bytes, %v: want the connection closed by the proxy", d, n, err)
		}
		if d == 0 && !timedOut {
			t.Errorf("no deadlines: read %d bytes, %v: want the connection kept open", n, err)
		}
		c.Close()
	}
}

// TestLoopProxyClosesOnBody checks that the event loop floor, which passes
// only requests without a body, closes the connection of one with a body
// rather than pass half of it.
func TestLoopProxyClosesOnBody(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loop floor needs epoll")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	addr := freeAddr(t)
	go func() { _ = loopProxy(addr, up.URL) }()
	var c net.Conn
	var err error
	for i := 0; i < 100; i++ {
		if c, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: bench\r\nContent-Length: 3\r\n\r\nabc")
	n, err := c.Read(make([]byte, 64))
	if n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}
}

// TestFloors429Answer checks that the three floors under the 429 path
// answer each of several pipelined requests with a whole 429 whose head
// and body are the same size, so that they send what the edge engine's
// refusal sends.
func TestFloors429Answer(t *testing.T) {
	floors := map[string]func(addr string) error{"fixed429": fixed429, "conn429": conn429}
	if runtime.GOOS == "linux" {
		floors["loop429"] = loop429
	}
	sizes := map[string]int{}
	for name, serve := range floors {
		addr := freeAddr(t)
		errc := make(chan error, 1)
		go func() { errc <- serve(addr) }()
		c := dialFloor(t, name, addr, errc)
		for i, resp := range threePipelined(t, name, c) {
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" ||
				resp.Header.Get("RateLimit") == "" || resp.Header.Get("Date") == "" {
				t.Fatalf("%s: answer %d: %d %v %q %v", name, i, resp.StatusCode, resp.Header, body, err)
			}
			size := len(body)
			for k, vs := range resp.Header {
				for _, v := range vs {
					size += len(k) + len(v) + 4
				}
			}
			sizes[name] = size
		}
		c.Close()
	}
	for name, n := range sizes {
		if n != sizes["fixed429"] {
			t.Errorf("%s answers %d bytes of fields and body, fixed429 %d", name, n, sizes["fixed429"])
		}
	}
}

// TestFlowLoopAnswersAsTheEdgeEngine checks that the flow loop runs the
// gateway's flow: over the bench's reject.yaml (one request a minute per
// address) its first request is passed, which it does not serve (502, the
// connection closed), and each of three pipelined requests after it is
// refused with the status, fields and body the edge engine answers over
// the same file, so that the bench measures the same answer.
func TestFlowLoopAnswersAsTheEdgeEngine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the flow loop needs epoll")
	}
	flowFloorAnswersAsTheEdgeEngine(t, "flowloop", flowLoop)
}

// TestFlowConnAnswersAsTheEdgeEngine: the flow on a goroutine per
// connection refuses as the edge engine does, as flowloop.
func TestFlowConnAnswersAsTheEdgeEngine(t *testing.T) {
	flowFloorAnswersAsTheEdgeEngine(t, "flowconn", flowConns)
}

// flowFloorAnswersAsTheEdgeEngine checks that the floor name, serving the
// 429 path's policy file, answers three pipelined requests refused with the
// edge engine's answers (the same status, body and fields, bar the Date).
func flowFloorAnswersAsTheEdgeEngine(t *testing.T, name string, floor func(addr string, g *gateway.Gateway) error) {
	const file = "../bench-gateway/reject.yaml"
	refusals := func(name string, serve func(addr string) error) []*http.Response {
		addr := freeAddr(t)
		errc := make(chan error, 1)
		go func() { errc <- serve(addr) }()
		first := dialFloor(t, name, addr, errc)
		fmt.Fprint(first, "GET /first HTTP/1.1\r\nHost: bench\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(first), nil)
		first.Close()
		if err != nil || resp.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("%s: the first request: %v %v, want it passed", name, resp, err)
		}
		c := dialFloor(t, name, addr, errc)
		defer c.Close()
		return threePipelined(t, name, c)
	}
	fl, closeFlow, err := policyGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFlow()
	loopAnswers := refusals(name, func(addr string) error { return floor(addr, fl) })
	eg, closeEdge, err := policyGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEdge()
	e := edge.New(eg, edge.Options{})
	defer e.Close()
	edgeAnswers := refusals("edge engine", func(addr string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		return e.Serve(ln)
	})
	for i := range loopAnswers {
		a, b := loopAnswers[i], edgeAnswers[i]
		ab, _ := io.ReadAll(a.Body)
		bb, _ := io.ReadAll(b.Body)
		if a.StatusCode != http.StatusTooManyRequests || a.StatusCode != b.StatusCode || !bytes.Equal(ab, bb) {
			t.Fatalf("answer %d: %s %d %q, edge engine %d %q", i, name, a.StatusCode, ab, b.StatusCode, bb)
		}
		delete(a.Header, "Date")
		delete(b.Header, "Date")
		if len(a.Header) != len(b.Header) {
			t.Fatalf("answer %d: %s's fields %v, the edge engine's %v", i, name, a.Header, b.Header)
		}
		for k := range b.Header {
			if a.Header.Get(k) == "" {
				t.Fatalf("answer %d: %s has no %s (%v)", i, name, k, a.Header)
			}
		}
		if p := a.Header.Get("RateLimit-Policy"); p != b.Header.Get("RateLimit-Policy") || !strings.Contains(a.Header.Get("RateLimit"), "r=0") {
			t.Fatalf("answer %d: %s's fields %v, the edge engine's %v", i, name, a.Header, b.Header)
		}
	}
}

// threePipelined sends three GETs on c in one write and returns their
// answers, each body read whole.
func threePipelined(t *testing.T, name string, c net.Conn) []*http.Response {
	t.Helper()
	fmt.Fprint(c, "GET /a HTTP/1.1\r\nHost: bench\r\n\r\nGET /b HTTP/1.1\r\nHost: bench\r\n\r\nGET /c HTTP/1.1\r\nHost: bench\r\n\r\n")
	br := bufio.NewReader(c)
	var out []*http.Response
	for i := 0; i < 3; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: answer %d: %v", name, i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: answer %d: %v", name, i, err)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		out = append(out, resp)
	}
	return out
}

// TestFlowConnPasses: the flow on a goroutine per connection, serving the
// pass-through's policy file pointed at a real upstream, forwards kept-alive
// requests with the upstream's Host and the client's address in
// X-Forwarded-For, and answers with the upstream's answer and the
// RateLimit fields the edge engine adds, for each of three requests.
func TestFlowConnPasses(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "path=%s host=%s xff=%s agent=%s", r.URL.Path, r.Host, r.Header.Get("X-Forwarded-For"), r.UserAgent())
	}))
	defer up.Close()
	src, err := os.ReadFile("../bench-gateway/pass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pass.yaml")
	policy := strings.Replace(string(src), "upstream: http://127.0.0.1:9\n", "upstream: "+up.URL+"\n", 1)
	if policy == string(src) {
		t.Fatal("pass.yaml: no upstream line to point at the test's upstream")
	}
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	g, closeStore, err := policyGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	addr := freeAddr(t)
	errc := make(chan error, 1)
	go func() { errc <- flowConns(addr, g) }()
	c := dialFloor(t, "flowconn", addr, errc)
	defer c.Close()
	br := bufio.NewReader(c)
	upHost := strings.TrimPrefix(up.URL, "http://")
	for i := 0; i < 3; i++ {
		path := fmt.Sprintf("/r%d", i)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: gateway.example\r\nUser-Agent: bench\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "path=" + path + " host=" + upHost + " xff=127.0.0.1 agent=bench"
		if err != nil || resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("request %d: %d %q %v, want 200 %q", i, resp.StatusCode, body, err, want)
		}
		if resp.Header.Get("X-Upstream") != "yes" || resp.Header.Get("RateLimit-Policy") == "" || resp.Header.Get("RateLimit") == "" {
			t.Fatalf("request %d: fields %v, want the upstream's and RateLimit's", i, resp.Header)
		}
	}
}
