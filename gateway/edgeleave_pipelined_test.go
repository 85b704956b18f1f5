package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		u := newHolding()
		g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 1
tiers: [{name: default}]
queue: {size: 4, per_tenant: 4, max_wait: 60s}`), u.ServeHTTP)
		base = withConnContext(t, front, g, base)
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }) }
		t.Cleanup(release) // a test that fails lets the held request go too
		held := make(chan error, 1)
		go func() {
			_, err := get(c, t.Context(), base+"/held")
			held <- err
		}()
		pollUntil(t, "the first request to be held", func() bool { return u.now.Load() == 1 })
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, "the second request to wait", func() bool { return overloadState(g).Queued == 1 })
		if _, err := io.WriteString(conn, pipelinedBody()); err != nil {
			t.Fatal(err)
		}
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection was kept open; the gateway sent %q", got)
		}
		if len(got) > 0 {
			t.Errorf("a client that left while waiting for a place was answered %q, want no answer", got)
		}
		pollUntil(t, "the queue to empty", func() bool { return overloadState(g).Queued == 0 })
		release()
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		if n := u.served.Load(); n != 1 {
			t.Errorf("the upstream served %d requests, want 1 (the one that left never goes on)", n)
		}
	})
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
		conn, err := net.Dial("tcp", strings.TrimPrefix(srvURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
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
				t.Fatalf("the answer ended before the client meant to leave (%v): %q", err, got)
			}
		}
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
