package gateway

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// TestLeaveSilentStream holds a streamed answer (an event stream, and a
// chunked long poll) whose client leaves while the upstream sends nothing
// more: the request ends when the client leaves, not when the upstream next
// writes, so its concurrency slot comes back and the upstream's request is
// ended. An HTTP/1.0 client, whose answer is ended by the close, is watched
// alike.
func TestLeaveSilentStream(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		for _, sc := range []struct{ kind, proto string }{
			{"text/event-stream", "HTTP/1.1"},
			{"application/json", "HTTP/1.1"},
			{"text/event-stream", "HTTP/1.0"},
			{"application/json", "HTTP/1.0"},
		} {
			kind, proto := sc.kind, sc.proto
			t.Run(kind+" "+proto, func(t *testing.T) {
				rule := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Hour})
				ended := make(chan bool, 1)
				_, srvURL, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/stream" {
						return
					}
					w.Header().Set("Content-Type", kind)
					_, _ = io.WriteString(w, "data: first\n\n")
					_ = http.NewResponseController(w).Flush()
					select { // silent until the gateway ends the request
					case <-r.Context().Done():
						ended <- true
					case <-time.After(60 * time.Second):
						ended <- false
					}
				})
				leaver{until: func(b []byte) bool { return bytes.Contains(b, []byte("first")) }}.run(t, srvURL, "GET /stream "+proto+"\r\nHost: x\r\n\r\n")
				deadline := time.Now().Add(20 * time.Second)
				for {
					a := do(t, c, "GET", srvURL+"/other", nil)
					if a.status == 200 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the slot of a stream whose client left never came back: %d", a.status)
					}
					time.Sleep(10 * time.Millisecond)
				}
				if !<-ended {
					t.Error("the upstream's request was not ended when its client left")
				}
			})
		}
	})
}
