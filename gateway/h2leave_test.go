package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/floodgate/floodgate/limiter"
)

// What a charge costs when an HTTP/2 client leaves: it resets one stream
// (RST_STREAM) while its connection stays open, stops granting window
// (WINDOW_UPDATE), or resets many streams at once. The charges are those
// of an HTTP/1.1 client that leaves at the same point (leave_test.go).

// serveH2C serves g as `floodgate serve` serves it on the net/http engine
// (HTTP/1.1 and HTTP/2 with prior knowledge, ConnContext), on loopback
// until the test ends, and returns its base URL.
func serveH2C(t testing.TB, g *Gateway) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = ConnContext
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// newH2LeaveRig is newLeaveRig's gateway on net/http, served over h2c,
// with a send timeout of send (0: the default).
func newH2LeaveRig(t *testing.T, h http.HandlerFunc, send time.Duration) *leaveRig {
	t.Helper()
	const tpm = 100000
	probe := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Probe") != "" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprint(w, `{"usage":{"total_tokens":1}}`)
			return
		}
		h(w, r)
	}
	out := &leaveRig{log: make(endLog, 1024), tpm: tpm} // room for a rapid reset's records
	u := newUpstream(t, probe)
	g, err := New(Options{Matcher: mustPolicyMatcher(t, llmPolicy(t, u.URL, tpm)),
		Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{}), AccessLog: out.log, SendTimeout: send})
	if err != nil {
		t.Fatal(err)
	}
	out.base = serveH2C(t, g)
	return out
}

// h2Client is a raw HTTP/2 client (prior knowledge) on a connection of
// its own.
type h2Client struct {
	c  net.Conn
	fr *http2.Framer
	hb bytes.Buffer
	he *hpack.Encoder
}

// dialH2 connects to base and sends HTTP/2's preface and settings.
func dialH2(t *testing.T, base string) *h2Client {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &h2Client{c: c, fr: http2.NewFramer(c, c)}
	h.he = hpack.NewEncoder(&h.hb)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

// request opens stream id with a POST of body to path (the body's end
// ends the stream when end).
func (h *h2Client) request(t *testing.T, id uint32, path, body string, end bool) {
	t.Helper()
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", path},
		{"authorization", "Bearer key-1"}, {"content-type", "application/json"}} {
		_ = h.he.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteData(id, end, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

// read reads frames until until says so of what stream id got (its status
// and data), granting window for what it reads when grant.
func (h *h2Client) read(t *testing.T, id uint32, grant bool, until func(status string, data []byte) bool) (string, []byte) {
	t.Helper()
	var status string
	var data []byte
	for !until(status, data) {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("read: %v (status %q, %d bytes)", err, status, len(data))
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && status == "" {
				status = f.PseudoValue("status")
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				data = append(data, f.Data()...)
			}
			if grant && len(f.Data()) > 0 {
				_ = h.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				_ = h.fr.WriteWindowUpdate(f.StreamID, uint32(len(f.Data())))
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				t.Fatalf("stream %d reset by the server: %v", id, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v (last stream %d) while stream %d waited", f.ErrCode, f.LastStreamID, id)
		case *http2.SettingsFrame, *http2.PingFrame:
			h.acknowledge(f)
		}
	}
	return status, data
}

// reset cancels stream id (RST_STREAM CANCEL); the connection stays.
func (h *h2Client) reset(t *testing.T, id uint32) {
	t.Helper()
	if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
}

// chatBody is a completion request's body for maxTokens.
func chatBody(maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":"demo","stream":%v,"max_tokens":%d,"messages":[]}`, stream, maxTokens)
}

// startH2C is startFront on the net/http engine served over h2c.
func startH2C(t testing.TB, opts Options, h http.HandlerFunc) (*Gateway, string) {
	t.Helper()
	if h != nil {
		up := httptest.NewServer(h)
		t.Cleanup(up.Close)
		u, _ := url.Parse(up.URL)
		if pm, ok := opts.Matcher.(*PolicyMatcher); ok {
			pm.upstream = u
		} else {
			opts.Matcher = MatcherFunc(withUpstream{opts.Matcher, u}.Match)
		}
	}
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return g, serveH2C(t, g)
}

// get opens stream id with a GET of path.
func (h *h2Client) get(t *testing.T, id uint32, path string) {
	t.Helper()
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}, {"authorization", "Bearer key-1"}} {
		_ = h.he.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
}

// ended reads frames, granting no window, until stream id ends: reset by
// the server (its error code), or whole (""); the connection's end fails
// the test.
func (h *h2Client) ended(t *testing.T, id uint32) string {
	t.Helper()
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("read: %v before stream %d ended", err, id)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return f.ErrCode.String()
			}
		case *http2.DataFrame:
			if f.StreamID == id && f.StreamEnded() {
				return ""
			}
		case *http2.SettingsFrame, *http2.PingFrame:
			h.acknowledge(f)
		}
	}
}

// bigAnswer answers n bytes in writes of 32 KiB, with a Content-Length
// when known; it stops at the first failed write.
func bigAnswer(n int, known bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if known {
			w.Header().Set("Content-Length", fmt.Sprint(n))
		}
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for sent := 0; sent < n; sent += len(chunk) {
			if _, err := w.Write(chunk[:min(len(chunk), n-sent)]); err != nil {
				return
			}
		}
	}
}

// TestStalledClientIsCut: a client that stops taking its answer while
// keeping its connection (an HTTP/2 client that grants no flow-control
// window, an HTTP/1.1 client that reads nothing) held its request for as
// long as it kept the connection: its concurrency lease (a limit of one:
// everyone else refused 429), its upstream connection, and its
// reservation until the reservation's TTL. Past the send timeout the
// client is taken to have left: its stream is reset or its connection cut,
// its lease comes back, and its reservation is settled from the rest of
// the answer, as for a client that resets (TestLeaveJSONBody).
func TestStalledClientIsCut(t *testing.T) {
	t.Parallel()
	const send = 300 * time.Millisecond
	lease := func(t *testing.T, stall func(t *testing.T, base string), edge ...bool) {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Hour})
		h := bigAnswer(64<<20, false)
		up := func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/small" {
				_, _ = io.WriteString(w, "ok")
				return
			}
			h(w, r)
		}
		opts := Options{Matcher: oneRule(rule), Engine: memEngine(t), SendTimeout: send}
		var base string
		if len(edge) > 0 {
			_, base, _ = startFront(t, frontEdge, opts, up)
		} else {
			_, base = startH2C(t, opts, up)
		}
		stall(t, base)
		c := newClient(t)
		var last answer
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if last = do(t, c, "GET", base+"/small", nil); last.status == http.StatusOK {
				return
			}
		}
		t.Fatalf("a stalled client kept the only concurrency slot for 30 s: the next request was answered %d", last.status)
	}
	t.Run("HTTP/2 without window, lease", func(t *testing.T) {
		lease(t, func(t *testing.T, base string) {
			h := dialH2(t, base)
			h.get(t, 1, "/big")
			if code := h.ended(t, 1); code == "" {
				t.Fatal("a 64 MiB answer ended whole without window")
			} else {
				t.Logf("the stalled stream was reset: %s", code)
			}
		})
	})
	readNothing := func(t *testing.T, base string) {
		u, _ := url.Parse(base)
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// Reads nothing; the gateway's writes fill the socket's buffers
		// and wait.
	}
	t.Run("HTTP/1.1 reading nothing on the edge engine, lease", func(t *testing.T) {
		lease(t, readNothing, true)
	})
	t.Run("HTTP/1.1 reading nothing, lease", func(t *testing.T) {
		lease(t, readNothing)
	})
	t.Run("HTTP/2 without window, reservation", func(t *testing.T) {
		pad := strings.Repeat("x", 256<<10) // past the window, within the bytes read for a cost
		rig := newH2LeaveRig(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"choices":[{"message":{"content":"%s"}}],"usage":{"total_tokens":777}}`, pad)
		}, send)
		h := dialH2(t, rig.base)
		h.request(t, 1, "/v1/chat/completions", chatBody(90000, false), true)
		if code := h.ended(t, 1); code == "" {
			t.Fatal("a 256 KiB answer ended whole without window")
		}
		rig.log.wait(t)
		if got := rig.charged(t); got != 777 {
			t.Fatalf("an answer whose client granted no window cost %d tokens, want its usage, 777", got)
		}
	})
}

// TestH2ClientLeaves holds an HTTP/2 client that resets its stream
// (RST_STREAM CANCEL, its connection kept) to what an HTTP/1.1 client
// that leaves at the same point costs (leave_test.go): a stream left
// after its first event or before its status line pays the usage it
// reports; a failed login reset once its status came counts, also when
// 300 of them are reset at once (rapid reset); a request reset while it
// waits in a leaky queue never reaches the upstream and gives its place
// back; a reset stream whose upstream keeps silent gives its concurrency
// slot back.
func TestH2ClientLeaves(t *testing.T) {
	t.Parallel()
	t.Run("stream reset after its first event", func(t *testing.T) {
		s := &sseStream{n: 60, usage: 5000}
		rig := newH2LeaveRig(t, s.handler(t), 0)
		h := dialH2(t, rig.base)
		h.request(t, 1, "/v1/chat/completions", chatBody(90000, true), true)
		h.read(t, 1, true, func(_ string, d []byte) bool { return bytes.Count(d, []byte("\n\n")) >= 1 })
		h.reset(t, 1)
		rig.log.wait(t)
		if got := rig.charged(t); got != 5000 {
			t.Fatalf("a stream reset after its first event cost %d tokens, want its usage, 5000", got)
		}
	})
	t.Run("stream reset before its status line", func(t *testing.T) {
		left := make(chan struct{})
		var reached atomic.Bool
		s := &sseStream{n: 10, usage: 5000, before: left}
		rig := newH2LeaveRig(t, func(w http.ResponseWriter, r *http.Request) {
			reached.Store(true)
			s.handler(t)(w, r)
		}, 0)
		h := dialH2(t, rig.base)
		h.request(t, 1, "/v1/chat/completions", chatBody(90000, true), true)
		pollUntil(t, "the request to reach the upstream", reached.Load)
		h.reset(t, 1)
		close(left)
		rig.log.wait(t)
		if got := rig.charged(t); got != 5000 {
			t.Fatalf("a stream reset before its status line cost %d tokens, want its usage, 5000", got)
		}
	})
	login := func(t *testing.T, rapid bool) {
		var served atomic.Int64
		body := strings.Repeat("z", 4<<20)
		rig := newH2LeaveRig(t, func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			rc := http.NewResponseController(w)
			_ = rc.Flush()
			for i := range 10 {
				time.Sleep(5 * time.Millisecond)
				if _, err := io.WriteString(w, body[i*len(body)/10:(i+1)*len(body)/10]); err != nil || rc.Flush() != nil {
					return
				}
			}
		}, 0)
		h := dialH2(t, rig.base)
		if rapid {
			// Streams reset before their handler began never reach the
			// gateway (net/http drops them): those that do are counted by
			// the upstream's status, and the next attempt is refused.
			const n = 300
			for i := range n {
				id := uint32(1 + 2*i)
				h.request(t, id, "/login", "{}", true)
				h.reset(t, id)
			}
			for counted := 0; counted < 5; {
				if rig.log.wait(t) == http.StatusUnauthorized {
					counted++
				}
			}
			id := uint32(1 + 2*n)
			h.request(t, id, "/login", "{}", true)
			if st, _ := h.read(t, id, true, func(st string, _ []byte) bool { return st != "" }); st != "429" || served.Load() != 5 {
				t.Fatalf("%d failed logins reset at once, then one more: %d reached the upstream, the next was answered %s; want 5 on a limit of 5, then 429", n, served.Load(), st)
			}
			return
		}
		codes := map[int]int{}
		for i := range 12 {
			id := uint32(1 + 2*i)
			h.request(t, id, "/login", "{}", true)
			h.read(t, id, true, func(st string, _ []byte) bool { return st != "" })
			h.reset(t, id)
			codes[rig.log.wait(t)]++
		}
		if s := served.Load(); s != 5 || codes[http.StatusTooManyRequests] != 7 {
			t.Fatalf("12 failed logins reset by their clients once their status came: %d reached the upstream, logged %v; want 5 on a limit of 5, the rest 429", s, codes)
		}
	}
	t.Run("failed logins reset after their status", func(t *testing.T) { login(t, false) })
	t.Run("failed logins reset at once", func(t *testing.T) { login(t, true) })
	t.Run("reset while queued", func(t *testing.T) {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 3})
		store := newMemStore(t, newTestClock().Now)
		var reached atomic.Int64
		_, base := startH2C(t, Options{Matcher: oneRule(rule), Engine: limiter.New(store, limiter.Options{})}, func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			_, _ = io.WriteString(w, "served")
		})
		nextDelay := func() time.Duration {
			out := make([]floodgate.Decision, 1)
			if err := store.Decide(context.Background(), []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}, true, out); err != nil {
				t.Fatal(err)
			}
			return out[0].Delay
		}
		h := dialH2(t, base)
		h.get(t, 1, "/a")
		if st, _ := h.read(t, 1, true, func(st string, _ []byte) bool { return st != "" }); st != "200" {
			t.Fatalf("first request %s", st)
		}
		h.get(t, 3, "/queued")
		pollUntil(t, "the request to take its place in the queue", func() bool { return nextDelay() == 2*time.Minute })
		h.reset(t, 3)
		pollUntil(t, "the place to be given back", func() bool { return nextDelay() == time.Minute })
		if n := reached.Load(); n != 1 {
			t.Errorf("the upstream was reached %d times, want 1 (the queued request never goes on)", n)
		}
	})
	t.Run("reset while the upstream keeps silent", func(t *testing.T) {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Hour})
		_, base := startH2C(t, Options{Matcher: oneRule(rule), Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/silent" {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: x\n\n")
				_ = http.NewResponseController(w).Flush()
				<-r.Context().Done()
				return
			}
			_, _ = io.WriteString(w, "ok")
		})
		h := dialH2(t, base)
		h.get(t, 1, "/silent")
		h.read(t, 1, true, func(_ string, d []byte) bool { return len(d) > 0 })
		h.reset(t, 1)
		c := newClient(t)
		pollUntil(t, "the slot to come back", func() bool { return do(t, c, "GET", base+"/b", nil).status == http.StatusOK })
	})
}

// acknowledge answers the server's settings and pings, as a client must.
func (h *h2Client) acknowledge(f http2.Frame) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = h.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = h.fr.WritePing(true, f.Data)
		}
	}
}

// TestSilentUpstreamIsNotCut: the send bound times a write that waits for
// its client, never the time the upstream keeps silent before it: a long
// poll answered after three bounds and an event stream silent for three
// bounds between its events reach a client that reads, whole, on both
// engines. (A bound armed when the request began, or when the read of
// the upstream began, had passed by the time the answer came, and cut it.)
func TestSilentUpstreamIsNotCut(t *testing.T) {
	t.Parallel()
	const send = 200 * time.Millisecond
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		_, base, c := startFront(t, front, Options{Matcher: oneRule(ruletest.Rule(t, floodgate.Limit{Name: "any",
			Algorithm: floodgate.TokenBucket, Rate: 1000, Per: time.Second, Burst: 1000})), Engine: memEngine(t), SendTimeout: send},
			func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/poll":
					time.Sleep(3 * send)
					_, _ = io.WriteString(w, "answer")
				case "/events":
					w.Header().Set("Content-Type", "text/event-stream")
					for i := range 3 {
						if i > 0 {
							time.Sleep(3 * send)
						}
						_, _ = fmt.Fprintf(w, "data: %d\n\n", i)
						w.(http.Flusher).Flush()
					}
				}
			})
		for path, want := range map[string]string{"/poll": "answer", "/events": "data: 0\n\ndata: 1\n\ndata: 2\n\n"} {
			resp, err := c.Get(base + path)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(b) != want {
				t.Errorf("%s: %d %q, %v; want 200 %q: a silent upstream cut by the send bound", path, resp.StatusCode, b, err, want)
			}
		}
	})
}
