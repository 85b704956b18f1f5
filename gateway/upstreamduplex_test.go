package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUpstreamStreamsBeforeTheBodyEnds: an upstream that answers with a
// stream as soon as it has a request's head, while its client still
// sends the body, and reads the body on (as a server answering in full
// duplex does), has its answer passed on whole on each engine, its body
// reaching the upstream whole: 10 POSTs of 20 bytes, the last 10 sent a
// byte at a time once the upstream has sent its first event, each get
// both events (the second echoing the body) and the stream's end. (On
// the net/http engine the server read the rest of the client's body
// itself and closed it once the stream's head was written: the bytes it
// read never reached the upstream, the transport's next read of the body
// failed, and it closed the upstream connection, cutting the stream after
// its first event, in 50 of 50 such POSTs.)
func TestUpstreamStreamsBeforeTheBodyEnds(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		first := make(chan struct{}, 1)
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).EnableFullDuplex()
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: a\n\n")
			_ = http.NewResponseController(w).Flush()
			first <- struct{}{}
			b, _ := io.ReadAll(r.Body)
			_, _ = io.WriteString(w, "data: "+string(b)+"\n\n")
		})
		base := serveFront(t, fr, gatewayWith(t, up.URL, TransportOptions{}), nil)
		for i := range 10 {
			c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "POST /events HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\ntopic=news"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-first:
			case <-time.After(30 * time.Second):
				t.Fatal("the request never reached the upstream")
			}
			// The rest of the body once the gateway has the head of the
			// answer (on net/http, while its transport waits for the
			// body), a byte at a time.
			time.Sleep(20 * time.Millisecond)
			for _, b := range []byte("&since=42x") {
				if _, err := c.Write([]byte{b}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			b, err := io.ReadAll(resp.Body)
			c.Close()
			if want := "data: a\n\ndata: topic=news&since=42x\n\n"; resp.StatusCode != 200 || string(b) != want || err != nil {
				t.Fatalf("request %d: %d %q, %v; want 200 %q", i, resp.StatusCode, b, err, want)
			}
		}
	})
}
