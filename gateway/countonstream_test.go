package gateway

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// TestCountOnSettledByTheStatus: a request counted by outcome (count_on)
// is an attempt in flight only until its upstream's status is known, and
// is settled by that status even when its answer streams on. Against a
// login limit of 5 a minute that counts 401, five logins answered 200
// whose answers the upstream holds open let a sixth through, and once the
// reservations' TTL (10 s) has passed with the answers still open, they
// end having charged nothing: five failed logins are then answered 401 and
// the sixth 429. A limit of the same requests whose cost the answer tells
// (actual) is still settled when the answer ends. (Settled when their answers ended, the five held the
// limit full while they streamed, and past the TTL they were charged as
// five failed logins.)
func TestCountOnSettledByTheStatus(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		clk := newTestClock()
		p := compilePolicy(t, "login.yaml", `version: 1
routes:
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: login, algorithm: sliding_log, limit: 5, window: 1m, count_on: [401], reserve_ttl: 10s, match: {routes: [login]}}
  - name: tokens
    algorithm: fixed_window
    limit: 1000
    window: 1h
    estimate: {header: X-Max-Tokens, default: 100}
    actual: {header: X-Usage-Tokens}
    reserve_ttl: 10s
    match: {routes: [login]}
`)
		release := make(chan struct{})
		_, base, c := startFront(t, fr, Options{Matcher: mustPolicyMatcher(t, p),
			Engine: limiter.New(newMemStore(t, clk.Now), limiter.Options{})}, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if strings.Contains(r.Header.Get("X-Password"), "wrong") {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("X-Usage-Tokens", "7")
			_, _ = io.WriteString(w, "data: welcome\n\n")
			_ = http.NewResponseController(w).Flush()
			if r.Header.Get("X-Hold") == "" {
				return
			}
			select { // the session's events, until the test ends them
			case <-release:
			case <-r.Context().Done():
			}
		})
		login := func(password string, hold bool) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("POST", base+"/login", nil)
			req.Header.Set("X-Password", password)
			if hold {
				req.Header.Set("X-Hold", "1")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		var held []*http.Response
		for range 5 {
			resp := login("right", true)
			line, _ := bufio.NewReader(resp.Body).ReadString('\n')
			if resp.StatusCode != 200 || !strings.Contains(line, "welcome") {
				t.Fatalf("login: %d %q", resp.StatusCode, line)
			}
			held = append(held, resp)
		}
		resp := login("right", false)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("a login beside five answered 200 whose answers still stream: %d, want 200 (no failed login is in flight)", resp.StatusCode)
		}
		clk.Advance(15 * time.Second) // past the reservations' TTL, within the window
		close(release)
		for _, r := range held {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		var got []int
		left := int64(-1)
		for range 6 {
			resp := login("wrong", false)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, resp.StatusCode)
			if resp.StatusCode == http.StatusUnauthorized {
				left = remaining(t, answer{resp.StatusCode, resp.Header, ""}, "tokens")
			}
		}
		want := []int{401, 401, 401, 401, 401, 429}
		if !slices.Equal(got, want) {
			t.Errorf("six failed logins after five answered 200 streamed past their reservations' TTL: %v, want %v", got, want)
		}
		// The limit the answer's end settles beside them: the five held
		// past the TTL kept their estimates of 100, the sixth paid the 7
		// its answer told, and each failed login holds its own 100.
		if left != 1000-5*100-7-100 {
			t.Errorf("tokens left as a failed login was forwarded: %d, want %d", left, 1000-5*100-7-100)
		}
	})
}
