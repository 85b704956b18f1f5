package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/floodgate/floodgate/internal/upstreamtest"
	"github.com/floodgate/floodgate/penalty"
)

// TestCutLoginOffends: a failed login whose upstream sends its 401 and
// then cuts the body short (its Content-Length never reached) is an
// offence of a penalty-box rule counting 401 (three within ten minutes),
// as it is a failed login to a limit counted by outcome: the third bans
// the address, on each engine, and the fourth is answered 429 before it
// reaches the upstream, though the edge engine answers the cut ones 502.
// The access log records the upstream's 401 on both. (The edge engine
// counted them by its own 502: no ban however many passwords were tried,
// while the limit beside the rule counted each 401.)
func TestCutLoginOffends(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 100\r\n\r\nwrong password")
			return false // and the rest never comes
		})
		p := compilePolicy(t, "logins.yaml", fmt.Sprintf(`
server:
  bans:
    - {name: logins, key: client_ip, after: 3, within: 10m, ban: 15m, count_on: [401]}
routes:
  - {name: login, match: {paths: ["/login"]}, upstream: "http://%s"}
`, addr))
		box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(0, nil)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(box.Close)
		ended := make(endLog, 4)
		g, err := New(Options{Matcher: mustPolicyMatcher(t, p), Engine: memEngine(t), Gatekeeper: boxKeeper{box}, AccessLog: ended})
		if err != nil {
			t.Fatal(err)
		}
		base := serveFront(t, fr, g, nil)
		for i := range 4 {
			c := newClient(t)
			status := 0
			if resp, err := c.Post(base+"/login", "text/plain", nil); err == nil { // cut: 502 or an error
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status = resp.StatusCode
			}
			logged := ended.wait(t)
			_, _, banned := box.Banned("127.0.0.1", "", "")
			switch {
			case i < 3 && logged != http.StatusUnauthorized:
				t.Errorf("failed login %d with its body cut: logged %d, want 401", i+1, logged)
			case i < 2 && banned:
				t.Fatalf("banned after %d failed logins, want 3", i+1)
			case i == 2 && !banned:
				t.Fatalf("three failed logins with their bodies cut: not banned")
			case i == 3 && status != http.StatusTooManyRequests:
				t.Errorf("a fourth login once banned: %d, want 429", status)
			}
		}
	})
}
