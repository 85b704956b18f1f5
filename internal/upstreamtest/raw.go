// Package upstreamtest runs upstreams for tests that write their answers
// byte by byte: broken, early, late or unasked, as no net/http handler
// would.
package upstreamtest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// Raw is an upstream on loopback that reads requests on each connection
// and hands each, its body read, to answer, until answer returns false
// (the connection is then closed). Its listener and connections end with
// the test. It returns its address.
func Raw(t testing.TB, answer func(c net.Conn, req *http.Request) bool) string {
	t.Helper()
	return serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if !answer(c, req) {
				return
			}
		}
	})
}

// Fixed is an upstream on loopback that answers every request without a
// body with answer, as written, and allocates nothing per request: a
// benchmark's allocations are then those of what stands in front of it.
// It reads a request's head line by line and takes no body. Its listener
// and connections end with the test. It returns its address.
func Fixed(t testing.TB, answer []byte) string {
	t.Helper()
	return serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(bytes.TrimRight(line, "\r\n")) > 0 {
				continue // a line of the head
			}
			if _, err := c.Write(answer); err != nil {
				return
			}
		}
	})
}

// Heads is an upstream on loopback that reads each request's head as it
// came, line by line, with no body (requests without one), and answers it
// with what answer returns for it, as written, closing the connection
// after it when keep is false. head is only valid during the call. Its
// listener and connections end with the test. It returns its address.
func Heads(t testing.TB, answer func(head []byte) (out []byte, keep bool)) string {
	t.Helper()
	return serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		var head []byte
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			head = append(head, line...)
			if len(bytes.TrimRight(line, "\r\n")) > 0 {
				continue // a line of the head
			}
			out, keep := answer(head)
			head = head[:0]
			if _, err := c.Write(out); err != nil || !keep {
				return
			}
		}
	})
}

// serve accepts connections on a loopback listener and runs each on a
// goroutine of its own with conn, closing it after; the listener and the
// connections end with the test, and the goroutines before it ends. It
// returns the listener's address.
func serve(t testing.TB, conn func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close() // a gateway's kept connections end with the test
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				conn(c)
			})
		}
	})
	return ln.Addr().String()
}
