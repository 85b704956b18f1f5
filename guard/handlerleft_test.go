package guard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/guard"
)

// TestHandlerToldItsClientLeft: a handler that stops when its writes fail
// (it does not watch its request's context) learns that its client left
// on a route whose limit settles after the answer, as it does without
// the Guard: at once once the charge is final (a count_on limit once the
// status is known), and at the policy's drain_timeout when the rest of a
// 2xx answer may still tell its cost, as floodgate serve ends its
// upstream's request at those two bounds. Before, the Guard took and
// discarded every write up to drain_bytes (64 MiB), with no time bound:
// the handler, its goroutine and its concurrency slot stayed as long.
func TestHandlerToldItsClientLeft(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, `version: 1
server:
  upstream: {drain_timeout: 200ms}
limits:
  - {name: login, algorithm: sliding_log, limit: 3, window: 1h, count_on: [401], key: global, match: {paths: [/login]}}
  - name: tokens
    rate: 100000
    per: 1m
    key: global
    match: {paths: [/chat]}
    estimate: {header: x-max-tokens, default: 1000}
    actual: {body: usage.total_tokens}
`)
	g := newGuard(t, guard.File(file), guard.Options{ReloadInterval: -1})
	ended := make(chan error, 4)
	stop := make(chan struct{}) // ends the handlers when the test does
	srv := httptest.NewServer(g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.URL.Path == "/login" {
			w.WriteHeader(http.StatusUnauthorized)
		} else {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		_ = rc.Flush()
		// A heartbeat every few milliseconds until a write fails; the
		// usage would come at the end.
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := io.WriteString(w, ": beat\n\n"); err != nil {
				ended <- err
				return
			}
			_ = rc.Flush()
			time.Sleep(2 * time.Millisecond)
		}
	})))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before srv.Close, which waits for the handlers
	for _, path := range []string{"/login", "/chat"} {
		rawRequest(t, srv.URL, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", leaveStatusLine, false)
		select {
		case <-ended:
		case <-time.After(time.Minute):
			t.Errorf("%s: the handler writes on a minute after its client left", path)
		}
	}
}
