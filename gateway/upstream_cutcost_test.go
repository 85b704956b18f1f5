package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/upstreamtest"
	"github.com/floodgate/floodgate/limiter"
)

// TestUpstreamCutJSONTellsItsCost: a successful JSON answer that the
// upstream cuts short after the whole document telling its usage has come
// is charged that usage, or its estimate if that is more, on each engine,
// as a stream cut after its usage event is: never less than what was
// observed. A document cut in two tells nothing, and the estimate stays.
// (Before 2026-12-06 a JSON body cut short was never read: 700 tokens told
// before the cut were charged as the estimate of 100.)
func TestUpstreamCutJSONTellsItsCost(t *testing.T) {
	t.Parallel()
	usage := func(n int) string { return fmt.Sprintf(`{"usage":{"total_tokens":%d}}`, n) }
	long := `{"text":"` + strings.Repeat("x", 70<<10) + `","usage":{"total_tokens":700}}`
	answers := map[string]string{
		// A Content-Length that the body never reaches.
		"/whole": "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + usage(700),
		"/less":  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + usage(7),
		"/half":  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + `{"usage":{"total_tokens":700`,
		// Past the 64 KiB the edge engine reads whole, and chunked
		// without its last chunk: streamed on both engines.
		"/long":    fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(long)+100, long),
		"/chunked": fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(usage(700)), usage(700)),
		"/probe":   fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(usage(0)), usage(0)),
	}
	want := map[string]int64{"/whole": 700, "/less": 100, "/half": 100, "/long": 700, "/chunked": 700}
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			_, _ = io.WriteString(c, answers[req.URL.Path])
			return req.URL.Path == "/probe" // the others are cut: the connection is closed
		})
		p := compilePolicy(t, "tokens.yaml", fmt.Sprintf(`version: 1
routes:
  - {name: chat, match: {paths: ["/*"]}, upstream: "http://%s"}
limits:
  - name: tokens
    algorithm: fixed_window
    limit: 100000
    window: 1h
    key: "header:X-Scenario"
    estimate: {header: X-Max-Tokens, default: 100}
    actual: {body: usage.total_tokens}
`, addr))
		ended := make(endLog, 4) // says when each request has ended, its charge settled
		g, err := New(Options{Matcher: mustPolicyMatcher(t, p), Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), AccessLog: ended})
		if err != nil {
			t.Fatal(err)
		}
		base := serveFront(t, fr, g, nil)
		for path, w := range want {
			c := newClient(t)
			req, _ := http.NewRequest("GET", base+path, nil)
			req.Header.Set("X-Scenario", path)
			if resp, err := c.Do(req); err == nil { // cut: an error, at once or in the body
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			ended.wait(t)
			// The probe reserves 100 of its own and is told 0.
			pa := do(t, c, "GET", base+"/probe", map[string]string{"X-Scenario": path})
			ended.wait(t)
			if got := 100000 - 100 - remaining(t, pa, "tokens"); got != w {
				t.Errorf("%s: charged %d, want %d", path, got, w)
			}
		}
	})
}
