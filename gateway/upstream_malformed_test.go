package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/upstreamtest"
)

// rawExchange sends a GET of path to the front at base on a connection of
// its own and reads the answer whole: its status, fields, body, trailers,
// and the error that broke it off (nil when it was read to its end).
func rawExchange(t *testing.T, base, path string) (*http.Response, string, error) {
	t.Helper()
	resp, body, err := tryExchange(t, base, path)
	if resp == nil {
		t.Fatalf("%s: %v", path, err)
	}
	return resp, body, err
}

// tryExchange is rawExchange, but for an answer whose head never comes:
// its response is then nil, and the error says why.
func tryExchange(t *testing.T, base, path string) (*http.Response, string, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: a.example\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TestUpstreamTrailersNoTrailerMayHold: an upstream's chunked answer whose
// trailer section holds a field no trailer may hold (RFC 9110 §6.5.1:
// Set-Cookie, Content-Length, Authorization, ...) is never passed on as
// whole, and such a field never reaches the client, on each engine: the
// client gets the head and the body, then the connection is closed
// without the answer's end, as for a broken chunk
// (TestUpstreamAnswerCutShort). An answer whose Trailer field names one is
// answered 502. The edge engine's parser refuses both; before 2026-12-06
// the net/http engine passed the answer on whole, its trailers with it.
// Other trailers are read past (the edge engine) or passed on (net/http).
func TestUpstreamTrailersNoTrailerMayHold(t *testing.T) {
	t.Parallel()
	answers := map[string]string{
		"/set-cookie":     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nSet-Cookie: session=upstream\r\n\r\n",
		"/content-length": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nContent-Length: 99\r\n\r\n",
		"/authorization":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\nAuthorization: Basic eA==\r\n\r\n",
		"/declared":       "HTTP/1.1 200 OK\r\nTrailer: X-T, Set-Cookie\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"/benign":         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
	}
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			_, err := io.WriteString(c, answers[req.URL.Path])
			return err == nil
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		for path := range answers {
			resp, body, err := rawExchange(t, base, path)
			for _, name := range []string{"Set-Cookie", "Content-Length", "Authorization"} {
				if v, ok := resp.Trailer[name]; ok {
					t.Errorf("%s: the client got the trailer %s: %q", path, name, v)
				}
			}
			switch path {
			case "/benign":
				if resp.StatusCode != 200 || body != "ok" || err != nil {
					t.Errorf("%s: %d %q, %v; want 200 \"ok\" whole", path, resp.StatusCode, body, err)
				}
			case "/declared":
				if resp.StatusCode != http.StatusBadGateway {
					t.Errorf("%s: %d %q, %v; want 502", path, resp.StatusCode, body, err)
				}
			default:
				if resp.StatusCode != http.StatusBadGateway && err == nil {
					t.Errorf("%s: %d %q read whole, trailers %v; want a 502 or the answer broken off", path, resp.StatusCode, body, resp.Trailer)
				}
			}
		}
	})
}

// TestUpstreamFieldNameNotAToken: an upstream's field whose name holds a
// space ("X Bad: v"; RFC 9110 §5.1: a name is a token) never reaches the
// client, on each engine: net/http's transport reads it and its server
// writes no field whose name is not a token; the edge engine drops it.
// Before 2026-12-06 the edge engine passed it on as it came, a line no
// client or proxy in front can read as one field.
func TestUpstreamFieldNameNotAToken(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nX Bad: v\r\nContent Length: 5\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		resp, body, err := rawExchange(t, base, "/x")
		if resp.StatusCode != 200 || body != "ok" || err != nil || resp.Header.Get("X-Kept") != "1" {
			t.Fatalf("%d %q, %v, fields %v; want 200 \"ok\" with X-Kept", resp.StatusCode, body, err, resp.Header)
		}
		for name := range resp.Header {
			if strings.ContainsAny(name, " \t") {
				t.Errorf("the client got a field named %q: %q", name, resp.Header[name])
			}
		}
	})
}

// TestUpstreamSpaceBeforeColon: a field of an upstream's answer written
// with a space before its colon (`Set-Cookie : a=b`) reaches the client
// on the edge engine with the space removed (RFC 9112 §5.1 lets a proxy
// mend it so) and not at all on net/http, whose transport drops it, as
// docs/engines.md says; on neither does a field named with the space
// reach the client, and the rest of the answer is served.
func TestUpstreamSpaceBeforeColon(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nSet-Cookie : a=b\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		resp, body, err := rawExchange(t, base, "/x")
		if resp.StatusCode != 200 || body != "ok" || err != nil || resp.Header.Get("X-Kept") != "1" {
			t.Fatalf("%d %q, %v, fields %v; want 200 \"ok\" with X-Kept", resp.StatusCode, body, err, resp.Header)
		}
		for name := range resp.Header {
			if strings.ContainsAny(name, " \t") {
				t.Errorf("the client got a field named %q", name)
			}
		}
		want := []string(nil) // net/http drops the field
		if fr == "edge" {
			want = []string{"a=b"} // the edge engine mends it
		}
		if got := resp.Header.Values("Set-Cookie"); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("Set-Cookie %q, want %q", got, want)
		}
	})
}

// TestUpstreamLongChunkLineLeavesNothing: an upstream's chunked answer
// whose chunk line is longer than 4 KiB (an extension of 8 KB) is read
// whole by the edge engine, which skips extensions of any length, and
// broken off by net/http, which reads chunk lines of at most 4 KiB; either
// way nothing of it is left on the upstream connection for another
// request. The chunk after the long line holds a whole answer of its own:
// an engine that dropped the line and kept the connection would give it to
// the next request. Each later request gets the upstream's own answer.
func TestUpstreamLongChunkLineLeavesNothing(t *testing.T) {
	t.Parallel()
	fake := "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
	long := fmt.Sprintf("%x;x=%s\r\n%s\r\n", len(fake), strings.Repeat("a", 8<<10), fake)
	answers := map[string]string{
		"/first":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + long + "0\r\n\r\n",
		"/second": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n" + long + "0\r\n\r\n",
		"/next":   "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext",
	}
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			_, err := io.WriteString(c, answers[req.URL.Path])
			return err == nil
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		for _, path := range []string{"/first", "/second"} {
			for range 3 {
				resp, body, err := tryExchange(t, base, path)
				switch {
				case fr == frontEdge && (resp == nil || resp.StatusCode != 200 || err != nil || !strings.HasSuffix(body, fake)):
					t.Errorf("%s: %v %q, %v; want 200 with the chunk read whole", path, resp, body, err)
				case fr == frontNetHTTP && resp != nil && resp.StatusCode != http.StatusBadGateway && err == nil:
					t.Errorf("%s: %d %q read whole; want nothing, a 502 or the answer broken off", path, resp.StatusCode, body)
				}
				resp, body, err = rawExchange(t, base, "/next")
				if resp.StatusCode != 200 || body != "next" || err != nil {
					t.Errorf("after %s: /next answered %d %q, %v; want the upstream's own 200 \"next\"", path, resp.StatusCode, body, err)
				}
			}
		}
	})
}
