package edge

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestCloseEndsStreamingAnswers: Close closes the connections at once,
// those whose answers are streaming too, as net/http's Server.Close does
// (floodgate serve calls it when requests are still in flight at the
// shutdown timeout): an event stream that never ends, sent by fasthttp
// (HTTP/1.1) or by the engine itself (HTTP/1.0, untilClose), is cut, its
// client sees the close and its upstream's request ends, with parking on
// and off. Left running, each would hold its client's connection, its
// upstream's and a goroutine for as long as the upstream sends.
func TestCloseEndsStreamingAnswers(t *testing.T) {
	t.Parallel()
	for _, park := range []time.Duration{0, -1} {
		for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
			t.Run(fmt.Sprintf("%s park %v", proto, park), func(t *testing.T) {
				t.Parallel()
				upEnded := make(chan struct{})
				g := echoGateway(t, func(w io.Writer, r *http.Request) {
					defer close(upEnded)
					w.(http.ResponseWriter).Header().Set("Content-Type", "text/event-stream")
					for {
						if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
							return
						}
						w.(http.Flusher).Flush()
						select {
						case <-r.Context().Done():
							return
						case <-time.After(20 * time.Millisecond):
						}
					}
				}, "")
				e := New(g, Options{ParkIdleAfter: park})
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				served := make(chan error, 1)
				go func() { served <- e.Serve(ln) }()
				c, br := dial(t, ln.Addr().String())
				if _, err := fmt.Fprintf(c, "GET /events %s\r\nHost: a\r\n\r\n", proto); err != nil {
					t.Fatal(err)
				}
				if _, err := br.ReadString('\n'); err != nil {
					t.Fatalf("no answer: %v", err)
				}
				read := make(chan error, 1)
				go func() {
					_, err := io.Copy(io.Discard, br)
					read <- err
				}()
				_ = e.Close()
				// Bounds for a loaded machine, not speeds: the stream ticks
				// every 20 ms, and is never to end of itself.
				select {
				case <-read:
				case <-time.After(20 * time.Second):
					c.Close()
					<-read
					<-upEnded
					t.Fatal("the client's stream went on after Close")
				}
				select {
				case <-upEnded:
				case <-time.After(20 * time.Second):
					t.Fatal("the upstream's request went on after Close")
				}
				if err := <-served; err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
