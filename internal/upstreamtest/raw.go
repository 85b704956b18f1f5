// Package upstreamtest runs upstreams for tests that write their answers
// byte by byte: broken, early, late or unasked, as no net/http handler
// would.
package upstreamtest

import (
	"bufio"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close() // a gateway's kept connections end with the test
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				defer c.Close()
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
			}()
		}
	}()
	return ln.Addr().String()
}
