package edge

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestKeptHeadBoundedFromItsFirstByte: the head of a kept-alive
// connection's next request has ReadHeaderTimeout from its first byte
// (the engine's bound, not fasthttp's): a head that trickles is cut, never
// before the bound, whether it came after the answer before it or behind
// that request (pipelined), and a head that comes whole is served; so on
// a connection fasthttp serves (after OPTIONS *, which the front hands
// over) and on one the front serves (after a GET it answered).
func TestKeptHeadBoundedFromItsFirstByte(t *testing.T) {
	t.Parallel()
	g := policyGateway(t, `version: 1
routes:
  - {name: only, match: {paths: ["/only"]}, upstream: none}
`)
	const head = 400 * time.Millisecond
	e := New(g, Options{ReadHeaderTimeout: head})
	addr, stop := serveOn(t, e)
	t.Cleanup(stop) // after the clients' connections close (dial), also when the test fails
	// OPTIONS * is answered by the engine (on fasthttp), a GET of no
	// route by the front, the connection kept either way.
	for _, kept := range []struct {
		req    string
		status int
	}{
		{"OPTIONS * HTTP/1.1\r\nHost: gateway.example\r\n\r\n", http.StatusOK},
		{"GET /elsewhere HTTP/1.1\r\nHost: gateway.example\r\n\r\n", http.StatusNotFound},
	} {
		for _, pipelined := range []bool{false, true} {
			keptHeadBounded(t, addr, head, kept.req, kept.status, pipelined)
		}
	}
}

// keptHeadBounded sends options (answered status), then a next head
// behind it (pipelined) or after its answer, and checks that a head that
// trickles is cut at its bound, not before.
func keptHeadBounded(t *testing.T, addr string, head time.Duration, options string, status int, pipelined bool) {
	t.Helper()
	c, br := dial(t, addr)
	first := options
	if pipelined {
		first += "GET / HTTP/1.1\r\n"
	}
	if _, err := io.WriteString(c, first); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != status {
		t.Fatalf("%q: %d", options, res.StatusCode)
	}
	// A whole head on the same connection is answered.
	if !pipelined {
		if _, err := io.WriteString(c, options); err != nil {
			t.Fatal(err)
		}
		if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != status {
			t.Fatalf("a whole head after the first: %v %v", res, err)
		} else {
			res.Body.Close()
		}
		began = time.Now()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	cut := make(chan time.Time, 1)
	go func() {
		_, _ = io.ReadAll(br) // until the engine closes
		cut <- time.Now()
	}()
	deadline := time.After(10 * time.Second)
trickle:
	for i := 0; ; i++ {
		select {
		case at := <-cut:
			if d := at.Sub(began); d < head {
				t.Errorf("after %q, pipelined %v: a trickling head was cut after %v, before its bound of %v", options, pipelined, d, head)
			}
			break trickle
		case <-deadline:
			t.Fatalf("after %q, pipelined %v: a trickling head was never cut", options, pipelined)
		case <-time.After(20 * time.Millisecond):
			_, _ = fmt.Fprintf(c, "X-%d: y\r\n", i)
		}
	}
}
