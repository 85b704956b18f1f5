package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// statusUpstream is a raw upstream on loopback that answers each request
// with answer and closes its connection; a probe (X-Probe) is answered 200
// with a usage of 1 token.
func statusUpstream(t *testing.T, answer string) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				if req.Header.Get("X-Probe") != "" {
					const probe = `{"usage":{"total_tokens":1}}`
					_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(probe), probe)
					return
				}
				_, _ = io.WriteString(c, answer)
			}()
		}
	}()
	u, _ := url.Parse("http://" + ln.Addr().String())
	return u
}

// TestUpstreamStatusBelow100: an HTTP/1.1 upstream's status line of three
// digits below 100 (000, 042) is no status a client can be given: the
// client gets 502, as for a status outside 100–999 from an HTTP/2
// upstream, and the answer is none, so the reservation is given back (it
// was read as a 200 that charged the usage its body told, or passed on as
// an answer that is not HTTP/1.1).
func TestUpstreamStatusBelow100(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		const usage = `{"usage":{"total_tokens":500}}`
		for _, code := range []string{"000", "042", "099"} {
			t.Run(code, func(t *testing.T) {
				const tpm = 100000
				u := statusUpstream(t, fmt.Sprintf("HTTP/1.1 %s Odd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", code, len(usage), usage))
				rig := &leaveRig{log: make(endLog, 16), tpm: tpm}
				g, err := New(Options{Matcher: mustPolicyMatcher(t, llmPolicy(t, u.String(), tpm)),
					Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), AccessLog: rig.log})
				if err != nil {
					t.Fatal(err)
				}
				rig.base = serveFront(t, fr, g, nil)
				a := chat(t, newClient(t), rig.base, 9000, false)
				rig.log.wait(t)
				if a.status != http.StatusBadGateway {
					t.Errorf("an upstream's status %s was answered %d %q, want 502", code, a.status, a.body)
				}
				if got := rig.charged(t); got != 0 {
					t.Errorf("an upstream's status %s cost %d tokens, want the reservation given back, 0", code, got)
				}
			})
		}
	})
}

// TestUpstreamManyInterimAnswers: an upstream that tells a slow request's
// client it is still at work with an interim answer a second (102
// Processing) is answered its final answer on both engines, however many
// interim answers came before it within the upstream's timeout, and its
// reservation is settled by that answer; interim answers that never end
// (a megabyte of them, then the upstream closes) are answered 502 and
// their reservation is given back (no final answer began).
func TestUpstreamManyInterimAnswers(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		const tpm = 100000
		const usage = `{"usage":{"total_tokens":500}}`
		final := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(usage), usage)
		hint := "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
		for _, c := range []struct {
			name, answer string
			status       int
			cost         int64
		}{
			{"40 interim answers", strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 40) + final, http.StatusOK, 500},
			{"interim answers that never end", strings.Repeat(hint, (1<<20)/len(hint)), http.StatusBadGateway, 0},
		} {
			t.Run(c.name, func(t *testing.T) {
				u := statusUpstream(t, c.answer)
				rig := &leaveRig{log: make(endLog, 16), tpm: tpm}
				g, err := New(Options{Matcher: mustPolicyMatcher(t, llmPolicy(t, u.String(), tpm)),
					Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), AccessLog: rig.log})
				if err != nil {
					t.Fatal(err)
				}
				rig.base = serveFront(t, fr, g, nil)
				a := chat(t, newClient(t), rig.base, 9000, false)
				rig.log.wait(t)
				if a.status != c.status {
					t.Errorf("%s: answered %d %q, want %d", c.name, a.status, a.body, c.status)
				}
				if got := rig.charged(t); got != c.cost {
					t.Errorf("%s: cost %d tokens, want %d", c.name, got, c.cost)
				}
			})
		}
	})
}
