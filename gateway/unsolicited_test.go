package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// TestUnsolicitedUpstreamBytesAnswerNobody: bytes an upstream sends on a
// kept-alive connection that no request asked for (a second response: an
// upstream that read a request's body as a request of its own, a buggy
// one) answer no later request, on each engine. Read as the answer to the
// next request sent on that connection, they would give it a response that
// was never its own, and each request after it the response of the one
// before: one client's answers served to another.
func TestUnsolicitedUpstreamBytesAnswerNobody(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		name := "with the answer"
		if late {
			name = "after the answer"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forFronts(t, proxyFronts, func(t *testing.T, fr string) { testUnsolicitedUpstreamBytes(t, fr, late) })
		})
	}
}

// TestUnsolicitedUpstreamBytesUnderLoad: the same upstream, sending a
// second response with each answer, behind each engine, with eight clients
// at once: every client gets the answer to its own request. A request
// taking a kept connection just as the answer before it was read is where
// the bytes would slip through (net/http's transport looks for them only
// once it has put the connection back in its idle pool).
func TestUnsolicitedUpstreamBytesUnderLoad(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		base := serveFront(t, fr, unsolicitedGateway(t, false), nil)
		var wg sync.WaitGroup
		var wrong atomic.Int64
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := newClient(t)
				for i := range 100 {
					path := fmt.Sprintf("/w%d/req%d", w, i)
					a := do(t, c, "GET", base+path, nil)
					if want := "the answer to " + path + "\n"; a.body != want || a.status != 200 {
						if wrong.Add(1) <= 3 {
							t.Errorf("%s was answered %d %q", path, a.status, a.body)
						}
					}
				}
			}()
		}
		wg.Wait()
		if n := wrong.Load(); n > 0 {
			t.Errorf("%d of 800 requests got an answer not theirs", n)
		}
	})
}

func testUnsolicitedUpstreamBytes(t *testing.T, fr string, late bool) {
	base := serveFront(t, fr, unsolicitedGateway(t, late), nil)
	c := newClient(t)
	for i := range 6 {
		path := fmt.Sprintf("/req%d", i)
		a := do(t, c, "GET", base+path, nil)
		if want := "the answer to " + path + "\n"; a.body != want || a.status != 200 {
			t.Errorf("%s was answered %d %q", path, a.status, a.body)
		}
		if late {
			time.Sleep(60 * time.Millisecond) // the unasked bytes are there before the next request
		}
	}
}

// unsolicitedGateway is a gateway in front of an upstream that sends a
// second response no request asked for after each answer: with it, or 20
// ms later (late).
func unsolicitedGateway(t *testing.T, late bool) *Gateway {
	t.Helper()
	extra := []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 16\r\nContent-Type: text/plain\r\n\r\nnobody's answer\n")
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
			_ = c.Close() // the gateway's kept connections end with the test
		}
	})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
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
					body := "the answer to " + req.URL.Path + "\n"
					answer := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s", len(body), body))
					if !late {
						answer = append(answer, extra...)
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
					if late {
						select {
						case <-time.After(20 * time.Millisecond):
						case <-done:
							return
						}
						_, _ = c.Write(extra)
					}
				}
			}()
		}
	}()

	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100000, Window: time.Hour})
	u, err := url.Parse("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Matcher: MatcherFunc(withUpstream{oneRule(rule), u}.Match), Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
