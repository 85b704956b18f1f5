package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/upstreamtest"
)

// earlyHintsUpstream is a real upstream on loopback that answers every
// request with 103 Early Hints, then 200, and keeps its connection; it
// returns its URL and the paths it was asked for, in order.
func earlyHintsUpstream(t *testing.T) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var paths []string
	addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
		mu.Lock()
		paths = append(paths, req.Method+" "+req.URL.Path)
		mu.Unlock()
		_, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return err == nil
	})
	return "http://" + addr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

// interimExchange sends raw to the front at base on a connection of its
// own and reads every answer (interim ones too) until the gateway closes
// the connection; closed is false when it was still open after 10 s.
func interimExchange(t *testing.T, base, raw string) (answers []*http.Response, closed bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return answers, !(errors.As(err, &ne) && ne.Timeout())
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answers = append(answers, resp)
	}
}

// TestInterimAnswersKeepTheGatewaysFields: an upstream's interim answer
// (103 Early Hints) leaves the fields the gateway sets on the final
// answer, on both engines: the RateLimit fields reach the client with the
// 200, and a request with a chunked body and a Content-Length is answered
// Connection: close and its connection closed, so a request hidden where a
// proxy in front reads the body by its length is never read. The net/http
// engine relays the interim answer with its own fields alone; the edge
// engine reads past it. Before 2026-12-06 net/http's reverse proxy sent
// the gateway's fields with the 103 and cleared them, so the 200 came
// without RateLimit fields or Connection: close, the connection was kept,
// and the hidden request reached the upstream.
func TestInterimAnswersKeepTheGatewaysFields(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		up, paths := earlyHintsUpstream(t)
		base := serveFront(t, fr, gatewayTo(t, up), nil)

		answers, _ := interimExchange(t, base, "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if len(answers) == 0 || answers[len(answers)-1].StatusCode != http.StatusOK {
			t.Fatalf("a GET: answered %v, want a 200 last", interimStatuses(answers))
		}
		for _, a := range answers {
			final := a.StatusCode >= 200
			for _, name := range []string{"Ratelimit", "Ratelimit-Policy"} {
				if v, ok := a.Header[name]; ok != final {
					t.Errorf("a GET: the %d answer: %s %q (present %v); want it on the final answer alone", a.StatusCode, name, v, ok)
				}
			}
			if !final && a.Header.Get("Link") == "" {
				t.Errorf("a GET: the %d answer has no Link field: %v", a.StatusCode, a.Header)
			}
		}

		smuggle := "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
			"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
		answers, closed := interimExchange(t, base, smuggle)
		var finals []*http.Response
		for _, a := range answers {
			if a.StatusCode >= 200 {
				finals = append(finals, a)
			}
		}
		if len(finals) != 1 || finals[0].StatusCode != http.StatusOK || !finals[0].Close || !closed {
			t.Errorf("a chunked body with a Content-Length: answered %v (Connection: close %v), closed %v; want one 200 with Connection: close, then closed",
				interimStatuses(answers), len(finals) > 0 && finals[0].Close, closed)
		}
		if got := strings.Join(paths(), ", "); got != "GET /a, POST /chunked" {
			t.Errorf("the upstream was asked for %s, want GET /a, POST /chunked", got)
		}
	})
}

// interimStatuses are the statuses of answers, in order.
func interimStatuses(answers []*http.Response) []int {
	out := make([]int, len(answers))
	for i, a := range answers {
		out[i] = a.StatusCode
	}
	return out
}

// TestInterimAnswersNotSentToHTTP10Clients: an HTTP/1.0 client is sent no
// interim answer (RFC 9110 §15.2: a server must not send one a 1xx), on
// both engines, so a client that keeps its connection gets one answer a
// request, each its own. Before 2026-12-06 the net/http engine relayed an
// upstream's 103 Early Hints to it: two requests on a kept connection were
// answered 103 200 103 200, and a client of HTTP/1.0 took the 103 for the
// first request's answer and the first request's 200 for the second's.
// The net/http engine keeps no HTTP/1.0 connection
// (TestHTTP10ChunkedWithoutLengthClosesTheConnection): it answers the
// first request alone, with no 103.
func TestInterimAnswersNotSentToHTTP10Clients(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		up, paths := earlyHintsUpstream(t)
		base := serveFront(t, fr, gatewayTo(t, up), nil)
		want, wantPaths := []int{http.StatusOK, http.StatusOK}, "GET /a, GET /b"
		if fr == frontNetHTTP {
			want, wantPaths = []int{http.StatusOK}, "GET /a"
		}
		answers, closed := interimExchange(t, base, "GET /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\nHost: x\r\n\r\n")
		if got := interimStatuses(answers); !slices.Equal(got, want) || !closed {
			t.Errorf("two HTTP/1.0 requests on a kept connection: answered %v, closed %v; want %v, then closed", got, closed, want)
		}
		for _, a := range answers {
			if _, ok := a.Header["Ratelimit"]; !ok {
				t.Errorf("the %d answer has no RateLimit field: %v", a.StatusCode, a.Header)
			}
		}
		if got := strings.Join(paths(), ", "); got != wantPaths {
			t.Errorf("the upstream was asked for %s, want %s", got, wantPaths)
		}
	})
}
