package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// recordLog is an access log that hands on each request's record once the
// request has ended.
type recordLog chan accesslog.Record

func (l recordLog) Log(r *accesslog.Record) { l <- *r }

// http10Exchange sends req on a connection of its own and reads until the
// gateway closes it; it returns the answer's head and body as they came.
func http10Exchange(t *testing.T, base, req string) (head string, body []byte) {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the connection was not closed after the answer (%v); read %q", err, got)
	}
	h, b, ok := bytes.Cut(got, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("no answer head: %q", got)
	}
	return string(h) + "\r\n", b
}

// TestHTTP10StreamedAnswerEndsAtTheClose sends HTTP/1.0 requests, kept
// alive and not, whose answers have no length (chunked by the upstream, an
// event stream, a long body streamed, one the upstream ends by closing): the
// client gets the body as the upstream sent it, ended by the connection's
// close, never chunked, which an HTTP/1.0 client cannot read (RFC 9112 §7).
// Each request ends with its lease given back and its record written with
// the bytes sent.
func TestHTTP10StreamedAnswerEndsAtTheClose(t *testing.T) {
	t.Parallel()
	large := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, past what the edge engine reads whole
	events := "data: one\n\ndata: two\n\ndata: three\n\n"
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Hour})
		log := make(recordLog, 4)
		_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t), AccessLog: log}, func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			switch r.URL.Path {
			case "/chunked":
				_, _ = io.WriteString(w, "hello ")
				_ = rc.Flush()
				_, _ = io.WriteString(w, "world")
			case "/events":
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range strings.SplitAfter(events, "\n\n")[:3] {
					_, _ = io.WriteString(w, ev)
					_ = rc.Flush()
				}
			case "/large":
				for p := large; len(p) > 0; p = p[32<<10:] {
					_, _ = w.Write(p[:32<<10])
					_ = rc.Flush()
				}
			case "/until-close":
				c, brw, err := rc.Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello world")
				_ = brw.Flush()
				c.Close()
			}
		})
		for _, c := range []struct {
			path string
			want []byte
		}{
			{"/chunked", []byte("hello world")},
			{"/events", []byte(events)},
			{"/large", large},
			{"/until-close", []byte("hello world")},
		} {
			for _, conn := range []string{"", "Connection: keep-alive\r\n"} {
				what := fmt.Sprintf("HTTP/1.0 GET %s (%q)", c.path, strings.TrimSpace(conn))
				head, body := http10Exchange(t, base, "GET "+c.path+" HTTP/1.0\r\nHost: x\r\n"+conn+"\r\n")
				if !strings.HasPrefix(head, "HTTP/1.") || !strings.Contains(head, " 200 ") {
					t.Fatalf("%s: answered %q", what, head)
				}
				if strings.Contains(strings.ToLower(head), "transfer-encoding") || !bytes.Equal(body, c.want) {
					b := body
					if len(b) > 60 {
						b = b[:60]
					}
					t.Errorf("%s: answered\n%s\nwith %d body bytes %q..., want %d bytes as the upstream sent them, no transfer coding", what, head, len(body), b, len(c.want))
				}
				if !strings.Contains(head, "\r\nConnection: close\r\n") {
					t.Errorf("%s: the answer does not say the connection closes:\n%s", what, head)
				}
				select {
				case r := <-log:
					if r.Status != 200 || r.Bytes != int64(len(c.want)) {
						t.Errorf("%s: logged %d with %d bytes, want 200 with %d", what, r.Status, r.Bytes, len(c.want))
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("%s: the request never ended", what)
				}
			}
		}
	})
}

// TestHTTP10StreamSettledByItsUsage holds a streamed completion to an
// HTTP/1.0 client, which reads it whole or leaves after its first event:
// either way the request is charged the usage its upstream reports at the
// stream's end (5,000 of the 90,000 tokens reserved), and a client that
// reads it whole gets the events as sent, ended by the close.
func TestHTTP10StreamSettledByItsUsage(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		req := strings.Replace(chatRequest("x", 90000, true), " HTTP/1.1\r\n", " HTTP/1.0\r\nConnection: keep-alive\r\n", 1)
		t.Run("read whole", func(t *testing.T) {
			s := &sseStream{n: 20, usage: 5000}
			rig := newLeaveRig(t, fr, s.handler(t), TransportOptions{})
			head, body := http10Exchange(t, rig.base, req)
			if strings.Contains(strings.ToLower(head), "transfer-encoding") || !bytes.HasPrefix(body, []byte("data: {")) || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
				t.Errorf("answered\n%s\nwith %q, want the events as sent", head, body)
			}
			rig.log.wait(t)
			if got := rig.charged(t); got != 5000 {
				t.Fatalf("a stream read whole cost %d tokens, want its usage, 5000", got)
			}
		})
		t.Run("left after the first event", func(t *testing.T) {
			s := &sseStream{n: 60, usage: 5000}
			rig := newLeaveRig(t, fr, s.handler(t), TransportOptions{})
			leaver{until: func(b []byte) bool { return events(b) >= 1 }}.run(t, rig.base, req)
			rig.log.wait(t)
			if got := rig.charged(t); got != 5000 {
				t.Fatalf("a stream left after its first event cost %d tokens, want its usage, 5000", got)
			}
		})
	})
}

// TestHTTP10HeadAnswerHasNoTransferCoding: the answer to an HTTP/1.0 HEAD
// whose upstream says its GET would be chunked carries no
// `Transfer-Encoding`, which RFC 9112 §6.1 sends only to HTTP/1.1, and says
// what the GET gets: a body ended by the close.
func TestHTTP10HeadAnswerHasNoTransferCoding(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		u := http10Upstream(t, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
		g, err := New(Options{Matcher: MatcherFunc(func(r *Request, m *Match) error { m.Upstream = u; return nil }), Engine: memEngine(t)})
		if err != nil {
			t.Fatal(err)
		}
		head, body := http10Exchange(t, serveFront(t, fr, g, nil), "HEAD /x HTTP/1.0\r\nHost: x\r\n\r\n")
		if !strings.Contains(head, " 200 ") || strings.Contains(strings.ToLower(head), "transfer-encoding") || len(body) != 0 {
			t.Errorf("answered\n%s\nwith %q, want a 200 without a transfer coding or a body", head, body)
		}
	})
}
