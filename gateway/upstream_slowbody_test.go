package gateway

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/upstreamtest"
)

// TestUpstreamSlowSmallBody: an upstream that sends its answer's head at
// once and then a short body of known length steadily but slowly (a byte
// every third of server.upstream.timeout, the whole after more than the
// timeout) has answered in time; the client gets the answer whole on each
// engine, as it does a longer body (streamed). The edge engine reads a
// body up to 64 KiB whole under the deadline of the answer's head, set
// when the request was sent, and answers such a body 502.
func TestUpstreamSlowSmallBody(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"); err != nil {
				return false
			}
			for _, b := range []byte("hello") {
				time.Sleep(timeout / 3)
				if _, err := c.Write([]byte{b}); err != nil {
					return false
				}
			}
			return true
		})
		base := serveFront(t, fr, gatewayWith(t, "http://"+addr, TransportOptions{ResponseHeaderTimeout: timeout}), nil)
		resp, body, err := rawExchange(t, base, "/slow")
		if resp.StatusCode != 200 || body != "hello" || err != nil {
			t.Errorf("%d %q, %v; want 200 \"hello\"", resp.StatusCode, body, err)
		}
	})
}
