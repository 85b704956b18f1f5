package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// What a reservation costs when the client leaves at each point of the
// exchange, and when the upstream does: given back in full only when no
// upstream answer began; once the status is known, a count_on charge is
// final; once a 2xx answer began, the usage the upstream reports (the
// rest of its answer is read after the client left), else the estimate.

// endLog is an access log that tells when each request has ended: its
// record is written after its reservation was settled.
type endLog chan int

func (l endLog) Log(r *accesslog.Record) { l <- r.Status }

// wait returns the status logged for the next request to end.
func (l endLog) wait(t testing.TB) int {
	t.Helper()
	select {
	case s := <-l:
		return s
	case <-time.After(90 * time.Second):
		t.Fatal("no request ended")
		return 0
	}
}

// leaveRig is llmPolicy's gateway (a token limit of tpm a minute per key,
// estimated from max_tokens and settled from usage.total_tokens; a
// failed-login limit of 5 a minute counted by outcome) on front fr, in
// front of h, on a frozen clock, with an access log that says when each
// request ended.
type leaveRig struct {
	base string
	log  endLog
	tpm  int64
}

func newLeaveRig(t *testing.T, fr string, h http.HandlerFunc, up TransportOptions) *leaveRig {
	t.Helper()
	const tpm = 100000
	probe := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Probe") != "" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"usage":{"total_tokens":1}}`)
			return
		}
		h(w, r)
	}
	rig := &leaveRig{log: make(endLog, 16), tpm: tpm}
	opts := Options{Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), AccessLog: rig.log, Upstream: up}
	var next http.HandlerFunc
	if fr == frontMiddleware {
		next = probe
		opts.Matcher = mustPolicyMatcher(t, llmPolicy(t, "none", tpm))
	} else {
		u := newUpstream(t, probe)
		opts.Matcher = mustPolicyMatcher(t, llmPolicy(t, u.URL, tpm))
	}
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rig.base = serveFront(t, fr, g, next)
	return rig
}

func mustPolicyMatcher(t *testing.T, p *policy.Policy) *PolicyMatcher {
	t.Helper()
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// charged returns the tokens the requests so far hold: a probe that
// reserves 1 token reads the limit's remaining tokens.
func (rig *leaveRig) charged(t *testing.T) int64 {
	t.Helper()
	c := newClient(t)
	req, _ := http.NewRequest("POST", rig.base+"/v1/chat/completions", strings.NewReader(`{"model":"demo","max_tokens":1,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer key-1")
	req.Header.Set("X-Probe", "1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("probe: %d %s", resp.StatusCode, body)
	}
	rig.log.wait(t)
	return rig.tpm - 1 - remaining(t, answer{resp.StatusCode, resp.Header, string(body)}, "tpm")
}

// leaver is a client on a connection of its own that sends one request and
// leaves when until says so of what it has read: it closes the
// connection, or resets it (reset).
type leaver struct {
	reset bool
	until func(got []byte) bool
}

// chatRequest is a raw streamed completion request for max_tokens.
func chatRequest(host string, maxTokens int, stream bool) string {
	body := fmt.Sprintf(`{"model":"demo","stream":%v,"max_tokens":%d,"messages":[]}`, stream, maxTokens)
	return "POST /v1/chat/completions HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer key-1\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
}

// loginRequest is a raw failed login.
func loginRequest(host string) string {
	return "POST /login HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 2\r\n\r\n{}"
}

// run sends req to base and leaves; it returns what it read.
func (l leaver) run(t *testing.T, base, req string) []byte {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if l.reset {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 256)
	for l.until == nil || !l.until(got) {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("the answer ended before the client meant to leave (%v): %q", err, got)
		}
	}
	return got
}

// events counts the Server-Sent Events in the answer b.
func events(b []byte) int {
	_, body, _ := bytes.Cut(b, []byte("\r\n\r\n"))
	return bytes.Count(body, []byte("\n\n"))
}

// sseStream is an upstream that streams n content events, flushing each,
// then the usage event (total_tokens usage) and [DONE]. beforeUsage, when
// not nil, is waited for before the usage event; cut, when > 0, makes the
// upstream drop its connection after that many events instead (-1: right
// after the head, before any event).
type sseStream struct {
	n, usage    int
	beforeUsage <-chan struct{}
	before      <-chan struct{} // waited for before the status line
	afterHead   <-chan struct{} // waited for after the head, before the first event
	cut         int
	ended       chan error // gets how the handler's last write ended
}

func (s *sseStream) handler(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if s.before != nil && !waitFor(t, s.before) {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		if s.afterHead != nil {
			w.WriteHeader(http.StatusOK)
			_ = rc.Flush()
			if !waitFor(t, s.afterHead) {
				return
			}
		}
		if s.cut < 0 {
			w.WriteHeader(http.StatusOK)
			_ = rc.Flush()
			s.hangUp(t, rc)
			return
		}
		var err error
		write := func(ev string) {
			if err == nil {
				_, err = io.WriteString(w, "data: "+ev+"\n\n")
			}
			if err == nil {
				err = rc.Flush()
			}
		}
		for i := range s.n {
			if s.cut > 0 && i == s.cut {
				s.hangUp(t, rc)
				return
			}
			write(fmt.Sprintf(`{"choices":[{"delta":{"content":"word%d "}}]}`, i))
			time.Sleep(time.Millisecond)
		}
		if s.beforeUsage != nil && !waitFor(t, s.beforeUsage) {
			return
		}
		write(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}`, s.usage-1, s.usage))
		write("[DONE]")
		s.end(err)
	}
}

// waitFor waits for c to close, for a bounded time.
func waitFor(t *testing.T, c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-time.After(60 * time.Second):
		t.Error("the upstream waited in vain")
		return false
	}
}

// hangUp drops the upstream's connection: the chunked body is cut short.
func (s *sseStream) hangUp(t *testing.T, rc *http.ResponseController) {
	c, _, err := rc.Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	c.Close()
	s.end(nil)
}

func (s *sseStream) end(err error) {
	if s.ended != nil {
		s.ended <- err
	}
}

// TestLeaveStream holds a streamed completion that the client leaves to
// the usage its upstream reports: the gateway reads the rest of the stream
// after the client left. 90,000 tokens are reserved for each; each uses
// 5,000.
func TestLeaveStream(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testLeaveStream)
}

func testLeaveStream(t *testing.T, fr string) {
	for _, c := range []struct {
		name   string
		reset  bool
		events int // the client leaves once it has read this many events
	}{
		{"after the first of 60 events", false, 1},
		{"reset after the first of 60 events", true, 1},
		{"after 59 of 60 events", false, 59},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &sseStream{n: 60, usage: 5000}
			rig := newLeaveRig(t, fr, s.handler(t), TransportOptions{})
			leaver{reset: c.reset, until: func(b []byte) bool { return events(b) >= c.events }}.run(t, rig.base, chatRequest("x", 90000, true))
			rig.log.wait(t)
			if got := rig.charged(t); got != 5000 {
				t.Fatalf("a stream left %s cost %d tokens, want its usage, 5000", c.name, got)
			}
		})
	}
	t.Run("before the usage event", func(t *testing.T) {
		left := make(chan struct{})
		s := &sseStream{n: 60, usage: 5000, beforeUsage: left}
		rig := newLeaveRig(t, fr, s.handler(t), TransportOptions{})
		leaver{until: func(b []byte) bool { return events(b) >= 60 }}.run(t, rig.base, chatRequest("x", 90000, true))
		close(left)
		rig.log.wait(t)
		if got := rig.charged(t); got != 5000 {
			t.Fatalf("a stream left before its usage event cost %d tokens, want its usage, 5000", got)
		}
	})
	t.Run("after the head, before the first event", func(t *testing.T) {
		// The head reaches the client before the first event (an event
		// stream's head goes out at once): a client that reads it and
		// leaves is charged the usage, as one that leaves later.
		left := make(chan struct{})
		s := &sseStream{n: 10, usage: 5000, afterHead: left}
		rig := newLeaveRig(t, fr, s.handler(t), TransportOptions{})
		got := leaver{until: func(b []byte) bool { return bytes.Contains(b, []byte("\r\n\r\n")) }}.run(t, rig.base, chatRequest("x", 90000, true))
		if events(got) != 0 {
			t.Fatalf("the client read %d events before the upstream sent one", events(got))
		}
		close(left)
		rig.log.wait(t)
		if got := rig.charged(t); got != 5000 {
			t.Fatalf("a stream whose client left after its head cost %d tokens, want its usage, 5000", got)
		}
	})
	t.Run("before the status line", func(t *testing.T) {
		left := make(chan struct{})
		s := &sseStream{n: 10, usage: 5000, before: left}
		rig := newLeaveRig(t, fr, s.handler(t), TransportOptions{})
		rawClose(t, rig.base, chatRequest("x", 90000, true))
		close(left)
		rig.log.wait(t)
		if got := rig.charged(t); got != 5000 {
			t.Fatalf("a stream whose client left before the status line cost %d tokens, want its usage, 5000", got)
		}
	})
}

// rawClose sends req on a connection of its own and closes it at once,
// after the request is written.
func rawClose(t *testing.T, base, req string) {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the request reach the upstream
	c.Close()
}

// TestLeaveStreamUpstreamCut keeps the estimate of a stream its upstream
// cuts short: the answer began (its status was 200) and never told its
// usage; cut after five events, or right after its head, before any.
func TestLeaveStreamUpstreamCut(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		for _, cut := range []int{5, -1} {
			s := &sseStream{n: 60, usage: 5000, cut: cut}
			rig := newLeaveRig(t, fr, s.handler(t), TransportOptions{})
			c := newClient(t)
			req, _ := http.NewRequest("POST", rig.base+"/v1/chat/completions", strings.NewReader(`{"model":"demo","stream":true,"max_tokens":90000,"messages":[]}`))
			req.Header.Set("Authorization", "Bearer key-1")
			resp, err := c.Do(req)
			switch {
			case err == nil:
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			case cut > 0:
				t.Fatal(err)
			}
			// Cut before any event, the head may or may not have
			// reached the client: net/http's proxy flushes it on a timer
			// that races the body's end.
			rig.log.wait(t)
			if got := rig.charged(t); got != 90000 {
				t.Fatalf("a stream the upstream cut after %d events cost %d tokens, want the estimate, 90000", max(cut, 0), got)
			}
		}
	})
}

// TestLeaveJSONBody reads the rest of a large JSON answer (not a stream)
// after its client left, for the usage at its end.
func TestLeaveJSONBody(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		pad := strings.Repeat("x", 200<<10)
		rig := newLeaveRig(t, fr, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"choices":[{"message":{"content":"%s"}}],"usage":{"total_tokens":777}}`, pad)
		}, TransportOptions{})
		leaver{reset: true, until: func(b []byte) bool { return len(b) > 1000 }}.run(t, rig.base, chatRequest("x", 90000, false))
		rig.log.wait(t)
		if got := rig.charged(t); got != 777 {
			t.Fatalf("a JSON answer left after 1,000 bytes cost %d tokens, want its usage, 777", got)
		}
	})
}

// TestLeaveDrainBounds keeps the estimate when what follows the client's
// leaving is over the drain bounds, and ends the upstream's request at
// them: more bytes than DrainBytes, or a stream that stalls past
// DrainTimeout.
func TestLeaveDrainBounds(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		t.Run("bytes", func(t *testing.T) {
			ended := make(chan error, 1)
			chunk := "data: " + strings.Repeat("y", 1000) + "\n\n"
			rig := newLeaveRig(t, fr, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w)
				var err error
				for i := 0; i < 4096 && err == nil; i++ { // 4 MB
					if _, err = io.WriteString(w, chunk); err == nil {
						err = rc.Flush()
					}
				}
				if err == nil {
					_, err = io.WriteString(w, "data: {\"usage\":{\"total_tokens\":5000}}\n\n")
				}
				ended <- err
			}, TransportOptions{DrainBytes: 256 << 10})
			leaver{until: func(b []byte) bool { return events(b) >= 1 }}.run(t, rig.base, chatRequest("x", 90000, true))
			rig.log.wait(t)
			<-ended // the gateway stopped reading past the bound (loopback's buffers may hold the rest)
			if got := rig.charged(t); got != 90000 {
				t.Fatalf("a stream over the drain bound cost %d tokens, want the estimate, 90000", got)
			}
		})
		t.Run("time", func(t *testing.T) {
			ended := make(chan bool, 1)
			rig := newLeaveRig(t, fr, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"choices\":[]}\n\n")
				_ = http.NewResponseController(w).Flush()
				select { // stalls: the drain bound must end it
				case <-r.Context().Done():
					ended <- true
				case <-time.After(60 * time.Second):
					ended <- false
				}
			}, TransportOptions{DrainTimeout: 100 * time.Millisecond})
			leaver{until: func(b []byte) bool { return events(b) >= 1 }}.run(t, rig.base, chatRequest("x", 90000, true))
			rig.log.wait(t)
			if !<-ended {
				t.Error("the upstream's stalled request was not ended by the drain bound")
			}
			if got := rig.charged(t); got != 90000 {
				t.Fatalf("a stalled stream cost %d tokens, want the estimate, 90000", got)
			}
		})
	})
}

// TestLeaveLogin counts a failed login whose client leaves once it has
// the status line (closing or resetting, with a small or a large 401
// body), or before it: the upstream's 401 decides. 12 attempts against a
// limit of 5 a minute: 5 reach the upstream.
func TestLeaveLogin(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testLeaveLogin)
}

func testLeaveLogin(t *testing.T, fr string) {
	for _, c := range []struct {
		name   string
		reset  bool
		body   int  // the 401 body's size
		before bool // the client leaves before the status line
	}{
		{"close after the status line", false, 100, false},
		{"reset after the status line, large body", true, 4 << 20, false},
		{"close before the status line", false, 100, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var served atomic.Int64
			gate := make(chan struct{}, 1)
			body := strings.Repeat("z", c.body)
			rig := newLeaveRig(t, fr, func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				if c.before {
					select {
					case <-gate:
					case <-time.After(60 * time.Second):
						t.Error("the login upstream waited in vain")
					}
				}
				// The status line first, then the body, in parts: the
				// client leaves while it is still coming.
				w.WriteHeader(http.StatusUnauthorized)
				rc := http.NewResponseController(w)
				_ = rc.Flush()
				for i := 0; i < 10; i++ {
					time.Sleep(5 * time.Millisecond)
					if _, err := io.WriteString(w, body[i*len(body)/10:(i+1)*len(body)/10]); err != nil || rc.Flush() != nil {
						return
					}
				}
			}, TransportOptions{})
			statusLine := func(b []byte) bool { return bytes.Contains(b, []byte("\r\n")) }
			var n429 int
			for range 12 {
				if c.before && served.Load() < 5 {
					before := served.Load()
					rawCloseWhen(t, rig.base, loginRequest("x"), func() bool { return served.Load() > before })
					gate <- struct{}{}
				} else {
					got := leaver{reset: c.reset, until: statusLine}.run(t, rig.base, loginRequest("x"))
					if bytes.HasPrefix(got, []byte("HTTP/1.1 429")) {
						n429++
					}
				}
				rig.log.wait(t)
			}
			if n := served.Load(); n != 5 || n429 != 7 {
				t.Fatalf("12 failed logins whose clients left (%s): %d reached the upstream, %d answered 429; want 5 on a limit of 5 and 7", c.name, n, n429)
			}
		})
	}
}

// rawCloseWhen sends req on a connection of its own and closes it once
// ready says so.
func rawCloseWhen(t *testing.T, base, req string, ready func() bool) {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !ready(); {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the upstream")
		}
		time.Sleep(time.Millisecond)
	}
}

// shortWriter is a response writer whose writes take half of what they
// are given, then fail: a client that left in the middle of a write.
type shortWriter struct{ h http.Header }

func (w *shortWriter) Header() http.Header { return w.h }
func (w *shortWriter) WriteHeader(int)     {}
func (w *shortWriter) Write(b []byte) (int, error) {
	return len(b) / 2, io.ErrClosedPipe
}

// TestCostWriterTakesWholeWrites: once the client is gone, every write is
// taken whole (written in part, the rest read for the cost and
// discarded), so that the copy of the upstream's answer goes on to its end
// instead of stopping at a short write.
func TestCostWriterTakesWholeWrites(t *testing.T) {
	t.Parallel()
	st := &Flow{}
	rec := &Recorder{st: st}
	cw := &costWriter{ResponseWriter: &shortWriter{h: http.Header{}}, rec: rec, bounds: drainBounds{wait: time.Second, bytes: 1 << 20}}
	for _, b := range [][]byte{[]byte("0123456789"), []byte("abcdef")} {
		if n, err := cw.Write(b); n != len(b) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", b, n, err, len(b))
		}
	}
	if !cw.discard || cw.drained != 5+6 {
		t.Fatalf("discard %v, drained %d; want the client gone and 11 bytes discarded", cw.discard, cw.drained)
	}
}
