package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// EdgeFrontAs serves g on the edge engine as floodgate serve does on
// engine fast, front the net/http server it hands over to and whose bounds
// it takes; it returns the engine's address. Set from package gateway_test
// (edgefront_test.go).
var EdgeFrontAs func(t testing.TB, g *Gateway, front *http.Server) string

// agreePolicy has a limit of each kind a request's fields can move: by
// address (X-Forwarded-For from a trusted proxy), by API key, by user, by
// a header (X-Tenant), a cost read from a header (X-Cost), a route per
// kind of path pattern and format suffixes ignored. Every route goes to
// the test's upstream.
const agreePolicy = `version: 1
server:
  api_key_header: x-api-key
  trusted_proxies: [127.0.0.1]
  format_suffix: ignore
  user: {header: X-User}
  headers: {ratelimit: true, x_ratelimit: true, binding_limit: Floodgate-Limit}
plans:
  - {name: gold, rate: 4, per: 1h, burst: 4}
keys:
  - {name: acme, plan: gold, sha256: "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}
routes:
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: "http://127.0.0.1:1"}
  - {name: item, match: {methods: [GET, HEAD], paths: ["/items/{id}"]}, upstream: "http://127.0.0.1:1"}
  - {name: admin, match: {paths: ["/admin/**"]}, upstream: "http://127.0.0.1:1"}
  - {name: files, match: {paths: ["/files/*"]}, upstream: "http://127.0.0.1:1"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: login, rate: 2, per: 1h, burst: 2, key: client_ip, match: {routes: [login]}}
  - {name: admin, rate: 1, per: 1h, burst: 1, match: {routes: [admin]}}
  - {name: per-tenant, rate: 3, per: 1h, burst: 3, key: "header:X-Tenant", match: {routes: [item, files]}}
  - {name: per-user, rate: 5, per: 1h, burst: 5, key: user, match: {routes: [rest]}}
  - name: units
    algorithm: fixed_window
    limit: 20
    window: 1h
    key: global
    estimate: {header: X-Cost, default: 1}
  - {name: per-ip, rate: 50, per: 1h, burst: 50}
`

// received is what an upstream was sent, as the fuzz target compares it.
type received struct {
	Method, Target, Proto, Host string
	Header                      http.Header
	ContentLength               int64
	TransferEncoding            []string
	Body                        string
	BodyErr                     bool
}

// recorder is a real upstream on loopback that records every request it
// is sent.
type recorder struct {
	mu  sync.Mutex
	got []received
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, received{r.Method, r.RequestURI, r.Proto, r.Host, r.Header.Clone(),
		r.ContentLength, r.TransferEncoding, string(b), err != nil})
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

func (rc *recorder) take() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.got
	rc.got = nil
	return out
}

// agreeFront is one engine in front of its own upstream, on its own
// store.
type agreeFront struct {
	addr string
	up   *recorder
	host string // the upstream's address
}

// startAgreeFront serves p on engine front (frontNetHTTP or frontEdge)
// set up as floodgate serve sets it up, on a new memory store on clock.
func startAgreeFront(t testing.TB, front string, p *policy.Policy, clock *testClock, conns *sync.WaitGroup) agreeFront {
	t.Helper()
	rc := &recorder{}
	upSrv := httptest.NewUnstartedServer(rc)
	upSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	upSrv.Start()
	t.Cleanup(upSrv.Close)
	u, _ := url.Parse(upSrv.URL)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{
		Matcher: pm,
		Engine:  limiter.New(newMemStore(t, clock.Now), limiter.Options{}),
		Logger:  slog.New(slog.DiscardHandler),
		Now:     clock.Time,
	})
	if err != nil {
		t.Fatal(err)
	}
	// internal/app/serve.go's server, but for what only serve does
	// (tracing, the first request's bound, the HTTP/2 frame budget).
	srv := &http.Server{
		Handler:                      g,
		ReadHeaderTimeout:            10 * time.Second,
		ReadTimeout:                  10 * time.Second,
		IdleTimeout:                  10 * time.Second,
		MaxHeaderBytes:               64 << 10,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     log.New(io.Discard, "", 0),
		ConnContext:                  ConnContext,
		Protocols:                    new(http.Protocols),
		// Its connections' goroutines outlive Close (a 400 is followed
		// by half a second's wait for the client to read it): the fuzz
		// target waits for them once at its end.
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				conns.Done()
			}
		},
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if front == frontEdge {
		return agreeFront{EdgeFrontAs(t, g, srv), rc, u.Host}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return agreeFront{ln.Addr().String(), rc, u.Host}
}

// reply is one answer as the fuzz target compares it.
type reply struct {
	Status int
	Fields map[string]string
}

// exchange is what one connection to one engine came to.
type exchange struct {
	Replies  []reply
	Upstream []received
}

// agreeQuiet is how long a connection may stay silent, its answers
// given, before the client shuts its side down: an engine then either
// answers what it still holds or closes.
const agreeQuiet = 150 * time.Millisecond

// comparedFields are the answer's fields compared: the RateLimit fields
// and Retry-After.
var comparedFields = []string{"RateLimit", "RateLimit-Policy", "Retry-After", "X-RateLimit-Limit",
	"X-RateLimit-Remaining", "X-RateLimit-Reset", "Floodgate-Limit"}

// sendRaw writes raw on a new connection to addr and reads every answer
// until the engine closes the connection.
func sendRaw(addr string, raw []byte, quiet time.Duration) ([]reply, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write(raw) // an engine may close before it read it all
	method, _, _ := strings.Cut(string(raw), " ")
	br := bufio.NewReader(c)
	var out []reply
	shut := false
	for range 64 {
		if !shut {
			_ = c.SetReadDeadline(time.Now().Add(quiet))
			if _, err := br.Peek(1); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					_ = c.(*net.TCPConn).CloseWrite()
					shut = true
					continue
				}
				return out, nil
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
				errors.Is(err, os.ErrDeadlineExceeded) || isReset(err) {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return out, fmt.Errorf("no answer and no close within 5 s")
				}
				return out, nil
			}
			return out, fmt.Errorf("reading an answer: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r := reply{Status: resp.StatusCode, Fields: map[string]string{}}
		for _, k := range comparedFields {
			if v := resp.Header.Values(k); v != nil {
				r.Fields[k] = strings.Join(v, "\n")
			}
		}
		out = append(out, r)
		if resp.Close {
			// The engine closes: what follows (the body of a refusal
			// written to a HEAD, which the engine answered before it
			// knew the method) is no answer.
			return out, nil
		}
	}
	return out, nil
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// normalise takes out of what an upstream received what the engines are
// documented to send differently (docs/engines.md, "Where they still
// differ"), and what either transport adds of its own.
func normalise(rs []received, upstream string) []received {
	// "A request body that breaks (a broken chunk, a cut-off body)
	// ... either way no whole request reaches the upstream": a request
	// whose body was broken off is no request the upstream acts on.
	rs = slices.DeleteFunc(rs, func(r received) bool { return r.BodyErr })
	for i := range rs {
		if rs[i].Host == upstream { // each engine has its own upstream
			rs[i].Host = "upstream"
		}
		h := rs[i].Header
		// "X-Forwarded-Host is the host in lower case on the edge
		// engine (fasthttp's), as the client wrote it on net/http".
		if v := h.Values("X-Forwarded-Host"); v != nil {
			for j := range v {
				v[j] = strings.ToLower(v[j])
			}
		}
		// "TE: trailers from the client reaches the upstream on
		// net/http ...; the edge engine ... drops it".
		h.Del("Te")
		// "Content-Length: 0 on a request of another method than POST,
		// PUT and PATCH": the same empty body either way.
		if rs[i].ContentLength == 0 && h.Get("Content-Length") == "0" {
			h.Del("Content-Length")
		}
	}
	return rs
}

// FuzzEnginesAgree sends the same raw HTTP/1.x bytes over TCP to both
// engines, each in front of the same policy on its own memory store (on
// one clock, moved only between inputs) and its own upstream, twice (so
// that what the first round charged shows in the second's fields), and
// compares the statuses of the answers, their RateLimit fields and
// Retry-After, and what each upstream received: the same request must get
// the same answer whichever engine serves it (docs/engines.md).
func FuzzEnginesAgree(f *testing.F) {
	for _, s := range agreeSeeds() {
		f.Add([]byte(s))
	}
	p := compilePolicy(f, "agree.yaml", agreePolicy)
	var conns sync.WaitGroup
	f.Cleanup(func() { // after the fronts' own cleanups
		done := make(chan struct{})
		go func() { conns.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			f.Error("net/http connections still open 5 s after the last request")
		}
	})
	// One pair of engines for every input, on a clock moved two hours
	// (past every window of the policy) before each: what an input
	// charged does not reach the next.
	clock := newTestClock()
	fronts := map[string]agreeFront{}
	for _, fr := range proxyFronts {
		fronts[fr] = startAgreeFront(f, fr, p, clock, &conns)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 200<<10 {
			return
		}
		// A client that shuts its side down while its request is served
		// has left (docs/engines.md): on a loaded machine an engine may
		// take longer than the short wait to answer, so a disagreement is
		// looked at again with a long one before it fails the input.
		if msg := compareEngines(fronts, clock, raw, agreeQuiet); msg != "" {
			if msg := compareEngines(fronts, clock, raw, 10*agreeQuiet); msg != "" {
				t.Fatal(msg)
			}
		}
	})
}

// compareEngines sends raw twice to each engine of fronts, the clock
// moved past every window first, and says how they disagree ("" for
// not), quiet being how long a connection may stay silent before the
// client shuts its side down.
func compareEngines(fronts map[string]agreeFront, clock *testClock, raw []byte, quiet time.Duration) string {
	clock.Advance(2 * time.Hour)
	for _, a := range fronts {
		a.up.take()
	}
	for round := 1; round <= 2; round++ {
		got := map[string]exchange{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []string
		for fr, a := range fronts {
			wg.Go(func() {
				rs, err := sendRaw(a.addr, raw, quiet)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s, round %d: %v", fr, round, err))
				}
				got[fr] = exchange{rs, nil}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			return strings.Join(errs, "\n")
		}
		for fr, a := range fronts {
			x := got[fr]
			x.Upstream = normalise(a.up.take(), a.host)
			got[fr] = x
		}
		n, e := got[frontNetHTTP], got[frontEdge]
		if hasField(raw, "expect") {
			// "Expect: 100-continue on a request without a body ...
			// gets a 100 Continue before its answer on the edge
			// engine, the answer alone on net/http" (docs/engines.md).
			n.Replies, e.Replies = final(n.Replies), final(e.Replies)
		}
		if bytes.HasPrefix(raw, []byte("CONNECT ")) {
			// "CONNECT to a target that is no authority" is 400 on
			// net/http and 405 on the edge engine (docs/engines.md).
			n.Replies, e.Replies = connectRefused(n.Replies), connectRefused(e.Replies)
		}
		switch k := documentedDifference(raw); {
		case k == 0:
			return ""
		case k > 0:
			// What follows the first answers may be charged on one
			// engine and not the other: no second round.
			if round > 1 {
				return ""
			}
			n.Replies, e.Replies = n.Replies[:min(k, len(n.Replies))], e.Replies[:min(k, len(e.Replies))]
			n.Upstream, e.Upstream = n.Upstream[:min(k, len(n.Upstream))], e.Upstream[:min(k, len(e.Upstream))]
		}
		if len(e.Replies) == len(n.Replies)+1 && e.Replies[len(n.Replies)].Status == http.StatusBadRequest &&
			len(e.Replies[len(n.Replies)].Fields) == 0 {
			// "A connection that ends inside a request's head": 400
			// on the edge engine, no answer on net/http
			// (docs/engines.md).
			e.Replies = e.Replies[:len(n.Replies)]
		}
		if !agreeReplies(n.Replies, e.Replies) {
			return fmt.Sprintf("round %d: the engines answer %q differently:\nnet/http: %+v\nedge:     %+v", round, raw, n.Replies, e.Replies)
		}
		if !agreeUpstream(n.Upstream, e.Upstream) {
			return fmt.Sprintf("round %d: the engines forward %q differently:\nnet/http: %+v\nedge:     %+v", round, raw, n.Upstream, e.Upstream)
		}
	}
	return ""
}

// documentedDifference says how many of the answers and forwarded
// requests of raw the engines are documented to agree on: all (-1), the
// first (1), or none (0), for the shapes docs/engines.md lists where they
// still differ (the table of malformed requests and "Where they still
// differ").
func documentedDifference(raw []byte) int {
	s := string(raw)
	lower := strings.ToLower(s)
	line, _, _ := strings.Cut(s, "\n")
	line = strings.TrimSuffix(line, "\r")
	parts := strings.Split(line, " ")
	switch {
	// "an empty line before the request"
	case strings.HasPrefix(s, "\n") || strings.HasPrefix(s, "\r\n"):
		return 0
	// "no version (HTTP/0.9)"
	case len(parts) < 3:
		return 0
	// "HTTP/1.2", "HTTP/1.2 with a chunked body": another minor
	// version of HTTP/1 (any request of the connection).
	case hasOtherMinor(s):
		return 0
	// "an absolute target with an empty Host"
	case len(parts) > 1 && !strings.HasPrefix(parts[1], "/") && hasField(raw, "host") && !hasNonEmptyHost(raw):
		return 0
	// "two equal Content-Lengths"
	case strings.Count(lower, "\ncontent-length") > 1:
		return 0
	// "Transfer-Encoding on HTTP/1.0" (kept alive or not, with or
	// without a Content-Length)
	case strings.Contains(s, "HTTP/1.0") && hasField(raw, "transfer-encoding"):
		return 0
	// "chunks: an extension of 8 KB": net/http reads chunk lines of at
	// most 4 KiB.
	case hasField(raw, "transfer-encoding") && longLine(s, 4<<10):
		return 0
	// "A chunked body cut off in its trailers", "... or in a chunk size
	// line that is not one"
	case hasField(raw, "transfer-encoding") && trailersCutOff(s),
		hasField(raw, "transfer-encoding") && !strings.HasSuffix(s, "\n"):
		return 0
	// "A Host whose port is not a number"
	case hostPortNotANumber(raw):
		return 0
	// "An upgrade request with a body"
	case hasField(raw, "upgrade"):
		return 0
	// "Expect: 100-continue on a request without a body": refused, its
	// connection is closed on the edge engine and kept on net/http.
	case hasField(raw, "expect"):
		return 1
	// "HTTP/1.0 kept alive": net/http keeps no HTTP/1.0 connection.
	case strings.Contains(s, "HTTP/1.0"):
		return 1
	// "Bare LF line ends after the first request of a kept-alive
	// connection": the edge engine does not read them.
	case strings.Contains(strings.ReplaceAll(s, "\r\n", ""), "\n"):
		return 1
	}
	return -1
}

// fieldLines returns the lines of raw that look like fields, lower case.
func fieldLines(raw []byte) []string {
	var out []string
	for l := range strings.SplitSeq(strings.ToLower(string(raw)), "\n") {
		if strings.Contains(l, ":") {
			out = append(out, strings.TrimSuffix(l, "\r"))
		}
	}
	return out
}

func hasField(raw []byte, name string) bool {
	for _, l := range fieldLines(raw) {
		if n, _, _ := strings.Cut(l, ":"); strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

func hasNonEmptyHost(raw []byte) bool {
	for _, l := range fieldLines(raw) {
		if n, v, _ := strings.Cut(l, ":"); strings.TrimSpace(n) == "host" && strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

func hostPortNotANumber(raw []byte) bool {
	for _, l := range fieldLines(raw) {
		n, v, _ := strings.Cut(l, ":")
		if strings.TrimSpace(n) != "host" {
			continue
		}
		v = strings.TrimSpace(v)
		if i := strings.LastIndexByte(v, ':'); i >= 0 && !strings.Contains(v[i:], "]") {
			for _, c := range v[i+1:] {
				if c < '0' || c > '9' {
					return true
				}
			}
		}
	}
	return false
}

// hasOtherMinor reports whether raw names a version HTTP/1.x other than
// 1.0 and 1.1.
func hasOtherMinor(s string) bool {
	for rest := s; ; {
		i := strings.Index(rest, "HTTP/1.")
		if i < 0 {
			return false
		}
		rest = rest[i+len("HTTP/1."):]
		if !strings.HasPrefix(rest, "0") && !strings.HasPrefix(rest, "1") || len(rest) > 1 && rest[1] >= '0' && rest[1] <= '9' {
			return true
		}
	}
}

func longLine(s string, n int) bool {
	for l := range strings.SplitSeq(s, "\n") {
		if len(l) > n {
			return true
		}
	}
	return false
}

// lastChunk finds a chunked body's last chunk line: "0" (or any run of
// zeros, which both engines read as size 0), an extension or not, its
// line end.
var lastChunk = regexp.MustCompile(`\n0+(;[^\n]*)?\r?\n`)

// trailersCutOff reports whether s holds a last chunk whose trailer
// section the engines read as cut off (or as not ended), each its own way.
// After a last chunk line ended by CRLF, a trailer section ended by a bare
// LF ("00\r\n\n") is such a cut: net/http wants two bytes after the last
// chunk, fasthttp a CRLF. After one ended by a bare LF, both read an
// empty line of either kind as the end.
func trailersCutOff(s string) bool {
	loc := lastChunk.FindAllStringIndex(s, -1)
	if loc == nil {
		return false
	}
	m := loc[len(loc)-1]
	if rest := s[m[1]:]; strings.HasSuffix(s[m[0]:m[1]], "\r\n") {
		return rest != "\r\n" && !strings.HasSuffix(rest, "\n\r\n")
	}
	return !strings.HasSuffix(s, "\n\r\n") && !strings.HasSuffix(s, "\n\n")
}

// connectRefused reads a CONNECT's refusals as its 405: a 400 (net/http's
// for a CONNECT to a target that is no authority), and a 501 or 505 that
// another fault of the same request may get on one engine while the other
// names the CONNECT or a third fault ("CONNECT : HTTP/0.0" with a broken
// field line is 505 on net/http and 400 on the edge engine: "A request
// with two faults").
func connectRefused(rs []reply) []reply {
	rs = slices.Clone(rs)
	for i := range rs {
		switch rs[i].Status {
		case http.StatusBadRequest, http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
			rs[i].Status = http.StatusMethodNotAllowed
		}
	}
	return rs
}

// final leaves out the 100 Continue answers.
func final(rs []reply) []reply {
	return slices.DeleteFunc(slices.Clone(rs), func(r reply) bool { return r.Status == http.StatusContinue })
}

func agreeReplies(a, b []reply) bool {
	return slices.EqualFunc(a, b, func(x, y reply) bool {
		return (x.Status == y.Status || refusedEither(x, y)) && fmt.Sprint(x.Fields) == fmt.Sprint(y.Fields)
	})
}

// refusedEither reports whether x and y are each 400, 501 or 505, the
// refusals of "A request with two faults" (docs/engines.md): each engine
// may name the one it reads first, a broken field line or Host, an
// unknown transfer coding, another HTTP version.
func refusedEither(x, y reply) bool {
	bad := func(s int) bool {
		return s == http.StatusBadRequest || s == http.StatusNotImplemented || s == http.StatusHTTPVersionNotSupported
	}
	return bad(x.Status) && bad(y.Status) && len(x.Fields) == 0 && len(y.Fields) == 0
}

func agreeUpstream(a, b []received) bool {
	return slices.EqualFunc(a, b, func(x, y received) bool {
		if x.Target != y.Target && (unescapedByte(x.Target) || unescapedByte(y.Target)) {
			// "A byte that a path may not hold unescaped ... reaches
			// the upstream as it came on the edge engine and
			// percent-encoded on net/http, which then escapes the whole
			// path as Go's url.URL does" (docs/engines.md): the two
			// are compared unescaped.
			ux, errx := url.PathUnescape(x.Target)
			uy, erry := url.PathUnescape(y.Target)
			if errx == nil && erry == nil && ux == uy {
				x.Target, y.Target = "", ""
			}
		}
		return fmt.Sprintf("%+v", x) == fmt.Sprintf("%+v", y)
	})
}

// unescapedByte reports whether target holds a byte that RFC 3986 lets
// no path or query hold unescaped.
func unescapedByte(target string) bool {
	for i := 0; i < len(target); i++ {
		c := target[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:@/?%[]", c) >= 0:
		default:
			return true
		}
	}
	return false
}

// agreeSeeds are the shapes the engines read each in its own way.
func agreeSeeds() []string {
	const h = "Host: a.example\r\n"
	const end = "Connection: close\r\n\r\n"
	long := strings.Repeat("a", 64<<10-200)
	return []string{
		"GET /items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		"GET /items/1.json HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		"HEAD /items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		"get /items/1 HTTP/1.1\r\n" + h + end,
		"POST /login HTTP/1.1\r\n" + h + "Content-Length: 5\r\n" + end + "hello",
		"POST /login.json HTTP/1.1\r\n" + h + "X-Forwarded-For: 203.0.113.9\r\nContent-Length: 0\r\n" + end,
		"GET /admin/x HTTP/1.1\r\n" + h + "x-api-key: secret\r\n" + end,
		"GET /admin/x HTTP/1.1\r\n" + h + "x-api-key: secret\r\nX-Api-Key: other\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-User: alice\r\nX-User: bob\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-User: alice\r\nX_User: bob\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-Cost: 7\r\nX-Cost: 1\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-Cost: 7\r\nX_Cost: 1\r\n" + end,
		"GET /items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\nX-Tenant: t2\r\n" + end,
		"GET /items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\nX_Tenant: t2\r\n" + end,
		"GET /items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1,\r\n t2\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-Cost: 19\r\n" + end,
		// Smuggling shapes.
		"POST /rest HTTP/1.1\r\n" + h + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin/x HTTP/1.1\r\n" + h + end,
		"POST /rest HTTP/1.1\r\n" + h + "Content-Length: 4\r\nContent-Length: 5\r\n" + end + "hello",
		"POST /rest HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 5\r\n" + end + "hello",
		"POST /rest HTTP/1.1\r\n" + h + "Content-Length: 5, 5\r\n" + end + "hello",
		"POST /rest HTTP/1.1\r\n" + h + "Content-Length: +5\r\n" + end + "hello",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n" + end + "5\r\nhello\r\n0\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding: Chunked\r\n" + end + "5\r\nhello\r\n0\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, chunked\r\n" + end + "5\r\nhello\r\n0\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n" + end + "5\r\nhello\r\n0\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding: \tchunked\r\n" + end + "5\r\nhello\r\n0\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding: xchunked\r\n" + end + "5\r\nhello\r\n0\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding:\r\n chunked\r\n" + end + "5\r\nhello\r\n0\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n" + end + "5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"POST /rest HTTP/1.0\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"GET /rest HTTP/1.1\r\n" + h + "X-User: alice\r\n bob\r\n" + end,
		"GET /rest HTTP/1.1\n" + "Host: a.example\nX-User: alice\nConnection: close\n\n",
		"GET /rest HTTP/1.1\r\n" + h + "X-User: alice\rX-Cost: 9\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "\r\nGET /rest HTTP/1.1\n" + "Host: a.example\nConnection: close\n\n",
		"GET /items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n\r\nGET /items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		// Targets.
		"GET http://b.example/items/1 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		"GET http://B.Example:80/admin/x?q=1 HTTP/1.1\r\n" + h + end,
		"GET https://b.example/admin/x HTTP/1.1\r\n" + h + end,
		"GET /admin%2Fx HTTP/1.1\r\n" + h + end,
		"GET /files/a%2Fb HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		"GET /a%00/../admin/x HTTP/1.1\r\n" + h + end,
		"GET /x/%2e%2e/admin/x HTTP/1.1\r\n" + h + end,
		"GET /x/%2E%2E/admin/x HTTP/1.1\r\n" + h + end,
		"GET /x/../admin/x HTTP/1.1\r\n" + h + end,
		"GET //admin/x HTTP/1.1\r\n" + h + end,
		"GET /admin;a=b/x HTTP/1.1\r\n" + h + end,
		"GET /items/1;jsessionid=2 HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		"GET /admin/x?%zz HTTP/1.1\r\n" + h + end,
		"GET /ADMIN/x HTTP/1.1\r\n" + h + end,
		"GET /admin/x#frag HTTP/1.1\r\n" + h + end,
		"GET admin/x HTTP/1.1\r\n" + h + end,
		"GET * HTTP/1.1\r\n" + h + end,
		"OPTIONS * HTTP/1.1\r\n" + h + end,
		"CONNECT a.example:443 HTTP/1.1\r\n" + h + end,
		"OPTIONS /items/1 HTTP/1.1\r\n" + h + end,
		"DELETE /files/x HTTP/1.1\r\n" + h + "X-Tenant: t1\r\n" + end,
		// Versions and Host.
		"GET /rest HTTP/1.0\r\n\r\n",
		"GET /rest HTTP/1.0\r\n" + h + "\r\n",
		"GET /rest HTTP/1.1\r\n" + end,
		"GET /rest HTTP/1.1\r\nHost:\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + h + end,
		"GET /rest HTTP/1.1\r\nHost: A.EXAMPLE:8080\r\n" + end,
		"GET /rest HTTP/1.1\r\nHost: u@a.example\r\n" + end,
		"GET /rest HTTP/2.0\r\n" + h + end,
		"GET /rest HTTP/1.2\r\n" + h + end,
		"GET /rest\r\n\r\n",
		"POST /rest HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 5\r\n" + end + "hello",
		"POST /admin/x HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 5\r\n" + end + "hello",
		"POST /rest HTTP/1.1\r\n" + h + "Expect: 100-Continue\r\nContent-Length: 5\r\n" + end + "hello",
		"POST /rest HTTP/1.1\r\n" + h + "Expect: fancy\r\nContent-Length: 5\r\n" + end + "hello",
		// Forwarding and hop-by-hop fields.
		"GET /rest HTTP/1.1\r\n" + h + "X-Forwarded-For: 203.0.113.9, 10.0.0.1\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nForwarded: for=1.2.3.4\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 198.51.100.1\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "Connection: X-User, close\r\nX-User: alice\r\n\r\n",
		"GET /rest HTTP/1.1\r\n" + h + "TE: trailers\r\nKeep-Alive: 1\r\nProxy-Connection: x\r\nUpgrade: h2c\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "Authorization: Bearer x\r\nCookie: a=1\r\nCookie: b=2\r\n" + end,
		// Long fields near the bound.
		"GET /rest HTTP/1.1\r\n" + h + "X-Long: " + long + "\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-Long: " + long + long + "\r\n" + end,
		"GET /items/1 HTTP/1.1\r\n" + h + "X-Tenant: " + long + "\r\n" + end,
		"GET /rest?" + long + " HTTP/1.1\r\n" + h + end,
		"GET /rest HTTP/1.1\r\n" + h + "Bad Name: x\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-A: a\x00b\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + "X-User : alice\r\n" + end,
		"GET /rest HTTP/1.1\r\n" + h + ": x\r\n" + end,
	}
}
