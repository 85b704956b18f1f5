package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// TestLeaveBodyReadForEstimate: a client that stalls in the middle of a
// body read for its estimate (estimate: {body: max_tokens}) never has its
// request passed on whole, whatever its Content-Length: no upstream gets
// it whole, the client gets no answer, and its reservation is given back. The body's
// length is that of the text of the read's error, which the client can
// work out from the two addresses: a body taken for whole when it was
// that text would reach the upstream as one the client never sent.
func TestLeaveBodyReadForEstimate(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		const tpm = 100000
		var chats atomic.Int64
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return // a body broken off on its way (net/http sends it as it comes)
			}
			w.Header().Set("Content-Type", "application/json")
			if r.Header.Get("X-Probe") != "" {
				_, _ = io.WriteString(w, `{"usage":{"total_tokens":1}}`)
				return
			}
			chats.Add(1) // a request whose body came whole
			_, _ = io.WriteString(w, `{"usage":{"total_tokens":500}}`)
		})
		rig := &leaveRig{log: make(endLog, 16), tpm: tpm}
		g, err := New(Options{Matcher: mustPolicyMatcher(t, llmPolicy(t, up.URL, tpm)),
			Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), AccessLog: rig.log})
		if err != nil {
			t.Fatal(err)
		}
		addr := serveWithReadTimeouts(t, fr, g, clientBodyRead)
		rig.base = "http://" + addr

		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		// The text of the gateway's read that times out.
		n := len(fmt.Sprintf("read tcp %s->%s: i/o timeout", c.RemoteAddr(), c.LocalAddr()))
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-1\r\n" +
			"Content-Type: application/json\r\nContent-Length: " + fmt.Sprint(n) + "\r\n\r\n"
		if _, err := io.WriteString(c, head+`{"max_tokens":9`); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c) // the client stalls; the gateway's read timeout ends it
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the gateway kept a stalled body's connection open; it sent %q", got)
		}
		rig.log.wait(t)
		if len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 4") {
			t.Errorf("a request whose body stalled was answered %q", got)
		}
		if n := chats.Load(); n != 0 {
			t.Errorf("a request whose body stalled reached the upstream whole %d times", n)
		}
		if got := rig.charged(t); got != 0 {
			t.Errorf("a request whose body stalled holds %d tokens, want its reservation given back, 0", got)
		}
	})
}

// serveWithReadTimeouts serves g on front with read as its read timeouts
// (headers and body), on loopback until the test ends, and returns its
// address.
func serveWithReadTimeouts(t *testing.T, front string, g *Gateway, read time.Duration) string {
	t.Helper()
	switch front {
	case frontNetHTTP:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: g, ReadHeaderTimeout: read, ReadTimeout: read}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	case frontEdge:
		return EdgeFrontTimeouts(t, g, read)
	}
	t.Fatalf("unknown front %q", front)
	return ""
}
