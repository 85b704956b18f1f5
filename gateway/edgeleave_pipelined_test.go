package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// pipelinedBody is a request sent behind one that waits, with a body
// larger than what the edge engine reads ahead of itself (64 KiB).
func pipelinedBody() string {
	const n = 80 << 10
	return fmt.Sprintf("POST /behind HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", n, bytes.Repeat([]byte("b"), n))
}

// TestOverloadQueuedClientPipelinesThenLeaves: a client whose request
// waits for a place under its route's overload control, and that sends
// more than 64 KiB behind it (a pipelined request with a large body) and
// then shuts its side down, has left: its request leaves the queue, never
// reaches the upstream, and gets no answer, the connection closed. (The
// edge engine read the first 64 KiB, then stopped watching; net/http
// stops reading in the background at the first byte pipelined, and its
// request's context then no longer tells the client's end: either way the
// request kept its place until its wait ended.) On both engines, net/http's
// server with ConnContext as floodgate serve sets it.
func TestOverloadQueuedClientPipelinesThenLeaves(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, front string) { queuedClientLeaves(t, front, pipelinedBody(), true) })
}

// TestLeaveSilentStreamPipelined: a client that sends more than 64 KiB
// behind a request whose answer streams, and then closes its connection
// while the upstream sends nothing more, has left: the request ends, its
// concurrency slot comes back, and the upstream's request is ended. (The
// edge engine read the first 64 KiB, then stopped watching; net/http
// stops reading in the background at the first byte pipelined: either way
// the request went on until the upstream next wrote.) On both engines,
// net/http's server with ConnContext as floodgate serve sets it.
func TestLeaveSilentStreamPipelined(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Hour})
		ended := make(chan bool, 1)
		g, srvURL, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/stream" {
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			_ = http.NewResponseController(w).Flush()
			select { // silent until the gateway ends the request
			case <-r.Context().Done():
				ended <- true
			case <-time.After(30 * time.Second):
				ended <- false
			}
		})
		srvURL = withConnContext(t, fr, g, srvURL)
		conn := openStream(t, srvURL)
		// The answer streams: what comes now is read by the engine's watch.
		if _, err := io.WriteString(conn, pipelinedBody()); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if !<-ended {
			t.Error("the upstream's request was not ended when its client left")
		}
		pollUntil(t, "the stream's concurrency slot to come back", func() bool {
			return do(t, c, "GET", srvURL+"/other", nil).status == 200
		})
	})
}

// openStream sends GET /stream to the server at base over a connection
// of its own and reads the answer until its first event ("first"), so
// that the answer streams when it returns; the connection closes with
// the test.
func openStream(t *testing.T, base string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(conn, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 256)
	for !bytes.Contains(got, []byte("first")) {
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("the answer ended before its first event (%v): %q", err, got)
		}
	}
	return conn
}

// withConnContext returns base, or on the net/http engine the base URL of
// a server of g of its own whose ConnContext is the gateway's, as
// floodgate serve makes it: the one front serves has none.
func withConnContext(t *testing.T, front string, g *Gateway, base string) string {
	t.Helper()
	if front != frontNetHTTP {
		return base
	}
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}
