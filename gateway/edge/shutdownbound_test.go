package edge

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestWriteBoundDuringShutdown: an answer streaming to a client that takes
// every byte at once goes on to its end while the engine shuts down (the
// requests in flight may finish), however long that takes beside the send
// bound. The parker's clock, by which the write bound is moved, stops with
// the parker's sweeps at Shutdown; a bound still moved by it would never
// move again and cut the answer within one bound. An HTTP/1.0 client's
// answer, which the engine writes itself (ended by the close), is waited
// for as well: Shutdown does not return while it streams.
func TestWriteBoundDuringShutdown(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			testWriteBoundDuringShutdown(t, proto)
		})
	}
}

func testWriteBoundDuringShutdown(t *testing.T, proto string) {
	const (
		every  = 50 * time.Millisecond
		send   = 8 * every // long enough beside the sweeps to use the parker's clock
		chunks = 30
		gap    = 100 * time.Millisecond // chunks*gap is several send bounds
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range chunks {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(gap)
		}
	}))
	defer up.Close()
	f, err := config.Parse("shutdown.yaml", []byte(`version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: `+up.URL+`}
limits:
  - {name: roomy, rate: 1000000, burst: 1000000, key: global, scope: global}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, limiter.Options{}), SendTimeout: send})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := New(g, Options{ParkIdleAfter: every})
	served := make(chan error, 1)
	go func() { served <- e.Serve(ln) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Duration(chunks)*gap + 10*time.Second))
	if _, err := c.Write([]byte("GET /events " + proto + "\r\nHost: a\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	got := 0
	shut := make(chan error, 1)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "data: ") {
			continue
		}
		got++
		if got == chunks-1 {
			select {
			case err := <-shut:
				t.Fatalf("Shutdown returned (%v) while an answer streamed", err)
			default:
			}
		}
		if got == 1 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(chunks)*gap+10*time.Second)
				defer cancel()
				shut <- e.Shutdown(ctx)
			}()
		}
	}
	if got != chunks {
		t.Fatalf("the client read %d of %d events (%v): the answer was cut while the engine shut down, "+
			"about %v into it, with a send bound of %v", got, chunks, sc.Err(), time.Duration(got)*gap, send)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
