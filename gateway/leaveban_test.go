package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/penalty"
)

// TestLeaveLoginOffends: a penalty-box rule of failed logins (count_on:
// [401], three within ten minutes) on a route without limits, against a
// guesser that hangs up once each attempt has reached the upstream, before
// the status line (closing or resetting) or once it has it. Each attempt
// was made: its 401 is an offence as if its client had waited, the third
// bans the address, and the fourth is answered 429 with Retry-After before
// it reaches the upstream. Before, the net/http engine ended the
// upstream's request with its client's, never learnt the 401, and banned
// no one however many passwords were tried that way.
func TestLeaveLoginOffends(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testLeaveLoginOffends)
}

func testLeaveLoginOffends(t *testing.T, fr string) {
	for _, c := range []struct {
		name          string
		reset, before bool
	}{
		{"close before the status line", false, true},
		{"reset before the status line", true, true},
		{"close after the status line", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := compilePolicy(t, "logins.yaml", `
server:
  bans:
    - {name: logins, key: client_ip, after: 3, within: 10m, ban: 15m, count_on: [401]}
routes:
  - {name: login, match: {paths: ["/login"]}, upstream: http://127.0.0.1:9}
`)
			box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(0, nil)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(box.Close)
			var served atomic.Int64
			gate := make(chan struct{}, 1)
			_, base, hc := startFront(t, fr, Options{Matcher: mustPolicyMatcher(t, p), Engine: memEngine(t), Gatekeeper: boxKeeper{box}},
				func(w http.ResponseWriter, r *http.Request) {
					served.Add(1)
					if c.before {
						// The login is checked once its client has gone.
						select {
						case <-gate:
						case <-time.After(30 * time.Second):
							t.Error("the login upstream waited in vain")
						}
						select {
						case <-r.Context().Done():
						case <-time.After(100 * time.Millisecond):
						}
					}
					w.WriteHeader(http.StatusUnauthorized)
				})
			for i := range 3 {
				if c.before {
					n := served.Load()
					hangUpWhen(t, base, loginRequest("x"), c.reset, func() bool { return served.Load() > n })
					gate <- struct{}{}
				} else {
					leaver{reset: c.reset, until: func(b []byte) bool { return bytes.Contains(b, []byte("\r\n")) }}.run(t, base, loginRequest("x"))
				}
				if i < 2 {
					if _, _, banned := box.Banned("127.0.0.1", "", ""); banned {
						t.Fatalf("banned after %d failed logins, want 3", i+1)
					}
				}
			}
			pollUntilFor(t, "the ban of three failed logins whose clients left ("+c.name+")", 5*time.Second, func() bool {
				_, _, banned := box.Banned("127.0.0.1", "", "")
				return banned
			})
			a := do(t, hc, "POST", base+"/login", nil)
			if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" || served.Load() != 3 {
				t.Fatalf("the fourth login: %d Retry-After %q, %d reached the upstream; want 429 with Retry-After and 3",
					a.status, a.header.Get("Retry-After"), served.Load())
			}
		})
	}
}

// hangUpWhen sends req on a connection of its own and closes it, or
// resets it, once ready says so.
func hangUpWhen(t *testing.T, base, req string, reset bool, ready func() bool) {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if reset {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
	}()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the upstream")
		}
	}
}
