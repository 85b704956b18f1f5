package edge

import (
	"context"
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
				c, served, read := openStream(t, e, proto)
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

// TestCloseDuringShutdown: Close called while a Shutdown waits for an
// answer that streams on (net/http's pattern: Shutdown on the first
// signal, Close on the second) cuts that answer and returns at once, and
// the Shutdown returns with it; before, Close waited behind the Shutdown
// for the whole of its timeout (a minute here), the stream going on.
func TestCloseDuringShutdown(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			g := echoGateway(t, func(w io.Writer, r *http.Request) {
				w.(http.ResponseWriter).Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: tick\n\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}, "")
			e := New(g, Options{})
			c, served, read := openStream(t, e, proto)
			shut := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				shut <- e.Shutdown(ctx)
			}()
			time.Sleep(300 * time.Millisecond) // the Shutdown waits for the stream
			closed := make(chan struct{})
			go func() {
				_ = e.Close()
				close(closed)
			}()
			// Bounds for a loaded machine, well short of the Shutdown's minute.
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
				c.Close()
				t.Fatal("Close waited 20 s behind the Shutdown")
			}
			select {
			case <-read:
			case <-time.After(20 * time.Second):
				c.Close()
				t.Fatal("the client's stream went on after Close")
			}
			<-shut
			if err := <-served; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// openStream serves e on a loopback listener, asks it for /events over
// proto and reads the answer's status line; the rest of the answer is
// read in the background until the connection ends (read). served gets
// what Serve returned.
func openStream(t *testing.T, e *Engine, proto string) (c net.Conn, served, read chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served = make(chan error, 1)
	go func() { served <- e.Serve(ln) }()
	c, br := dial(t, ln.Addr().String())
	if _, err := fmt.Fprintf(c, "GET /events %s\r\nHost: a\r\n\r\n", proto); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	read = make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		read <- err
	}()
	return c, served, read
}
