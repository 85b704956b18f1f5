package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// http10Upstream is a real upstream on loopback that speaks HTTP/1.0: it
// answers each request with answer and closes the connection.
func http10Upstream(t *testing.T, answer string) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, answer)
			}()
		}
	}()
	u, _ := url.Parse("http://" + ln.Addr().String())
	return u
}

// TestUpstreamSpeakingHTTP10: an upstream that answers in HTTP/1.0 (and
// closes its connection) is answered to the client in the gateway's own
// version, HTTP/1.1, with the client's connection kept for its next
// request, as NGINX and net/http's proxy do, on each engine: whether the
// answer has a length or runs until the upstream closes.
func TestUpstreamSpeakingHTTP10(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testUpstreamSpeakingHTTP10)
}

func testUpstreamSpeakingHTTP10(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	for _, c := range []struct{ name, answer string }{
		{"with a length", "HTTP/1.0 200 Fine\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"},
		{"until it closes", "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello"},
		{"kept alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello"},
	} {
		u := http10Upstream(t, c.answer)
		m := funcMatcher(func(r *Request, m *Match) error {
			m.Upstream = u
			return oneRule(rule)(r, m)
		})
		g, err := New(Options{Matcher: m, Engine: memEngine(t)})
		if err != nil {
			t.Fatal(err)
		}
		base := serveFront(t, fr, g, nil)
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(conn)
		for i := range 2 {
			if _, err := io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: example.test\r\n\r\n"); err != nil {
				t.Fatalf("%s: request %d: %v", c.name, i, err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: request %d: %v (the connection was not kept)", c.name, i, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "hello" || resp.StatusCode != 200 {
				t.Fatalf("%s: request %d: %d %q %v", c.name, i, resp.StatusCode, b, err)
			}
			if resp.Proto != "HTTP/1.1" || resp.Close || resp.Status != "200 OK" {
				t.Errorf("%s: request %d: answered %q %q (close %v), want HTTP/1.1 200 OK, kept alive", c.name, i, resp.Proto, resp.Status, resp.Close)
			}
		}
	}
}
