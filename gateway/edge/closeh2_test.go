package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The attacks of this file hold HTTP/2 connections over TLS, which the
// engine hands to its fallback server once their client chose HTTP/2 by
// ALPN, and then stop the engine: every one is to be closed, its place
// under the cap on connections (server.max_connections, counted by
// floodgate_connections_open) given back, no goroutine left serving it and
// no request to the upstream left running.

// countedListener counts the connections it accepted that are not closed
// yet, as floodgate serve's cap on connections counts them; past max a new
// connection is closed at once (shed). peak is the most open at once.
type countedListener struct {
	net.Listener
	max  int64
	open atomic.Int64
	peak atomic.Int64
	shed atomic.Int64
}

func (l *countedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		n := l.open.Add(1)
		if n <= l.max {
			for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
			}
			return &countedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.shed.Add(1)
		_ = c.Close()
	}
}

// countedConn gives its place back when it is closed.
type countedConn struct {
	net.Conn
	l    *countedListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// h2Rig is an engine serving TLS on loopback whose fallback server speaks
// HTTP/2, in front of an upstream that streams events (/events, until its
// client leaves) and a download that never ends (/download).
type h2Rig struct {
	e      *Engine
	ln     *countedListener
	addr   string
	roots  *x509.CertPool
	served chan error
	// streams counts the upstream's answers under way.
	streams atomic.Int64
	// stop is closed when the engine is told to stop (stopping).
	stop     chan struct{}
	stopOnce sync.Once
}

// stopping says the engine is being stopped.
func (r *h2Rig) stopping() { r.stopOnce.Do(func() { close(r.stop) }) }

// newH2Rig starts an h2Rig whose listener takes at most max connections.
// Nothing in it times a connection out within a minute.
func newH2Rig(t *testing.T, max int64) *h2Rig {
	t.Helper()
	certs := httptest.NewUnstartedServer(http.NotFoundHandler())
	certs.StartTLS()
	t.Cleanup(certs.Close)
	r := &h2Rig{roots: certs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, stop: make(chan struct{})}
	t.Cleanup(r.stopping) // a test that failed before stopping it
	g := echoGateway(t, func(w io.Writer, req *http.Request) {
		r.streams.Add(1)
		defer r.streams.Add(-1)
		rw := w.(http.ResponseWriter)
		chunk, every := []byte("data: tick\n\n"), 20*time.Millisecond
		if req.URL.Path == "/download" {
			chunk, every = make([]byte, 32<<10), 0
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := rw.Write(chunk); err != nil {
				return
			}
			rw.(http.Flusher).Flush()
			select {
			case <-req.Context().Done():
				return
			case <-time.After(every):
			}
		}
	}, "")
	tc := &tls.Config{Certificates: certs.TLS.Certificates, NextProtos: []string{"h2", "http/1.1"}}
	fallback := &http.Server{Handler: g, TLSConfig: tc, ReadHeaderTimeout: time.Minute, Protocols: new(http.Protocols)}
	fallback.Protocols.SetHTTP1(true)
	fallback.Protocols.SetHTTP2(true)
	fallback.Protocols.SetUnencryptedHTTP2(true)
	r.e = New(g, Options{ReadHeaderTimeout: time.Minute, Fallback: fallback})
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.ln = &countedListener{Listener: plain, max: max}
	r.addr = plain.Addr().String()
	r.served = make(chan error, 1)
	go func() { r.served <- r.e.Serve(tls.NewListener(r.ln, tc)) }()
	return r
}

// clientTLS is the TLS configuration of a client of the rig asking for
// protos by ALPN.
func (r *h2Rig) clientTLS(protos ...string) *tls.Config {
	return &tls.Config{RootCAs: r.roots, ServerName: "example.com", NextProtos: protos}
}

// live reports how many connections the engine holds among its live ones.
func (r *h2Rig) live() int {
	r.e.liveMu.Lock()
	defer r.e.liveMu.Unlock()
	return len(r.e.live)
}

// handshakeH2 makes a TLS handshake on c that chooses HTTP/2.
func (r *h2Rig) handshakeH2(c net.Conn) (*tls.Conn, error) {
	tc := tls.Client(c, r.clientTLS("h2"))
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		return nil, fmt.Errorf("ALPN chose %q, not h2", p)
	}
	return tc, nil
}

// openStream opens an HTTP/2 stream on c, asking for path, and returns its
// answer once its first bytes came.
func openH2Stream(c net.Conn, path string) (*http.Response, *http2.ClientConn, error) {
	tr := &http2.Transport{}
	cc, err := tr.NewClientConn(c)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequest(http.MethodGet, "https://example.com"+path, nil)
	if err != nil {
		return nil, nil, err
	}
	res, err := cc.RoundTrip(req)
	if err != nil {
		cc.Close()
		return nil, nil, err
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		cc.Close()
		return nil, nil, fmt.Errorf("status %d", res.StatusCode)
	}
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		res.Body.Close()
		cc.Close()
		return nil, nil, err
	}
	return res, cc, nil
}

// endConn notes when a read of its connection fails: the other end closed
// it or reset it.
type endConn struct {
	net.Conn
	once  sync.Once
	ended chan struct{}
}

func newEndConn(c net.Conn) *endConn { return &endConn{Conn: c, ended: make(chan struct{})} }

func (c *endConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.once.Do(func() { close(c.ended) })
	}
	return n, err
}

// helloOnly passes its connection's first write (a TLS ClientHello) and
// fails the others: the server waits for the rest of a handshake that
// never comes.
type helloOnly struct {
	net.Conn
	writes int
}

func (c *helloOnly) Write(b []byte) (int, error) {
	c.writes++
	if c.writes > 1 {
		return 0, errors.New("no more of the handshake")
	}
	return c.Conn.Write(b)
}

// The kinds of HTTP/2 connections openH2Kind opens.
const (
	kindHalfRecord = "TLS, half a ClientHello record"
	kindHelloOnly  = "TLS, ClientHello for h2 sent, handshake never finished"
	kindNoPreface  = "h2 chosen, no preface"
	kindIdle       = "h2, idle after its preface and settings"
	kindStreaming  = "h2, an event stream read"
	kindStalled    = "h2, a download never read"
)

var h2Kinds = []string{kindHalfRecord, kindHelloOnly, kindNoPreface, kindIdle, kindStreaming, kindStalled}

// h2Client is a client connection of the rig: ended is closed once the
// server closed it (the client's read failed); handshake is when its TLS
// handshake was made (zero when it was not).
type h2Client struct {
	kind      string
	ended     <-chan struct{}
	handshake time.Time
}

// openH2Kind opens a connection of kind to the rig, closed with the test.
func (r *h2Rig) openH2Kind(t *testing.T, kind string) h2Client {
	t.Helper()
	raw, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	// The client's reads of its connection (through TLS once its
	// handshake is made) fail once the server closed it.
	ec := newEndConn(raw)
	cl := h2Client{kind: kind, ended: ec.ended}
	handshake := func() *endConn {
		tc, err := r.handshakeH2(raw)
		if err != nil {
			t.Fatal(err)
		}
		cl.handshake = time.Now()
		top := newEndConn(tc)
		cl.ended = top.ended
		return top
	}
	readAll := func(c io.Reader) { go func() { _, _ = io.Copy(io.Discard, c) }() }
	switch kind {
	case kindHalfRecord:
		if _, err := raw.Write([]byte{22, 3, 1, 0, 200}); err != nil {
			t.Fatal(err)
		}
		readAll(ec)
	case kindHelloOnly:
		if err := tls.Client(&helloOnly{Conn: ec}, r.clientTLS("h2")).Handshake(); err == nil {
			t.Fatal("a handshake whose client sent only its ClientHello finished")
		}
		readAll(ec)
	case kindNoPreface:
		readAll(handshake())
	case kindIdle:
		tc := handshake()
		cc, err := (&http2.Transport{}).NewClientConn(tc) // its preface and settings, then nothing
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		if err := cc.Ping(context.Background()); err != nil { // the server serves it
			t.Fatal(err)
		}
	case kindStreaming:
		tc := handshake()
		res, cc, err := openH2Stream(tc, "/events")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		readAll(res.Body)
	case kindStalled:
		// The client grants the server a window of a gigabyte and reads
		// nothing of its answer: the server's writes fill the socket and
		// wait.
		tc := handshake()
		if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(tc, tc)
		const window = 1 << 30
		if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteWindowUpdate(0, window-65535); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteSettingsAck(); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h2Get(r.addr, "/download"),
			EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		// Its reads start once the engine is told to stop.
		go func() {
			<-r.stop
			_, _ = io.Copy(io.Discard, tc)
		}()
	default:
		t.Fatalf("no connection of kind %q", kind)
	}
	return cl
}

// h2Get is the HPACK block of a GET of path.
func h2Get(authority, path string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return b.Bytes()
}

// connGoroutines counts the goroutines that serve a client connection of
// an engine: the engine's own, net/http's and its HTTP/2 server's.
func connGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "net/http.(*conn).serve") || strings.Contains(g, "net/http.(*http2serverConn)") ||
			strings.Contains(g, "gateway/edge.(*Engine).route") || strings.Contains(g, "fasthttp.(*Server).serveConn") {
			count++
		}
	}
	return count
}

// settled waits (a bound for a loaded machine) until the rig holds no
// client connection: none counted open, none among the engine's live ones,
// no goroutine serving one and no upstream answer under way.
func (r *h2Rig) settled(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		open, live, gs, streams := r.ln.open.Load(), r.live(), connGoroutines(), r.streams.Load()
		if open == 0 && live == 0 && gs == 0 && streams == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, 20 s on: %d connections counted open, %d live in the engine, %d goroutines serving "+
				"connections, %d upstream answers under way; want 0 of each", what, open, live, gs, streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openH2Flood opens n connections of each of kinds to r, and waits until
// the engine took them in.
func openH2Flood(t *testing.T, r *h2Rig, kinds []string, n int) []h2Client {
	t.Helper()
	var cls []h2Client
	for _, kind := range kinds {
		for range n {
			cls = append(cls, r.openH2Kind(t, kind))
		}
	}
	waitFor(t, "all counted open", func() bool { return r.ln.open.Load() == int64(len(cls)) })
	streams := 0
	for _, kind := range kinds {
		if kind == kindStreaming || kind == kindStalled {
			streams += n
		}
	}
	waitFor(t, "streaming", func() bool { return r.streams.Load() == int64(streams) })
	return cls
}

// endedAll checks that the server closed every client of cls, within a
// bound for a loaded machine, and those whose HTTP/2 preface never came
// before the HTTP/2 server's own 10 s bound on it could have.
func endedAll(t *testing.T, cls []h2Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	left := map[string]int{}
	for _, c := range cls {
		select {
		case <-c.ended:
			if c.kind == kindNoPreface && time.Since(c.handshake) >= 10*time.Second {
				t.Errorf("a connection whose preface never came was closed %v after its handshake: by the "+
					"HTTP/2 server's bound on the preface, not by the engine", time.Since(c.handshake))
			}
			continue
		case <-time.After(time.Until(deadline)):
		}
		left[c.kind]++
	}
	if len(left) > 0 {
		t.Fatalf("connections still open 20 s after the engine stopped, by kind: %v", left)
	}
}

// TestCloseEndsHTTP2OverTLS: Close closes at once every client connection
// that chose HTTP/2 by ALPN, which the engine hands to its fallback server:
// a hundred and more of them, idle before or after their preface, an event
// stream being read, a download never read, beside TLS handshakes never
// finished. Each client sees its connection end; none is counted open
// (server.max_connections, floodgate_connections_open) or held by the
// engine; no goroutine serves one; the upstream's answers end.
func TestCloseEndsHTTP2OverTLS(t *testing.T) {
	// Not parallel: the goroutines serving connections are counted.
	r := newH2Rig(t, 1<<20)
	cls := openH2Flood(t, r, h2Kinds, 20)
	t.Logf("%d connections open, %d live in the engine, %d goroutines serving them, %d upstream answers",
		r.ln.open.Load(), r.live(), connGoroutines(), r.streams.Load())
	r.stopping()
	if err := r.e.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	endedAll(t, cls)
	r.settled(t, "after Close")
	if err := <-r.served; err != nil {
		t.Fatal(err)
	}
}

// TestShutdownEndsHTTP2OverTLS: Shutdown closes the HTTP/2 connections
// over TLS that serve no request at once (idle after their preface, or
// whose preface never came), and the TLS handshakes never finished, while
// answers stream on other connections (over HTTP/2 and HTTP/1.1); once its
// deadline passed with those still streaming, Close (which floodgate serve
// calls then) ends them. Every client sees its connection end, and nothing
// is left counted open, held or served.
func TestShutdownEndsHTTP2OverTLS(t *testing.T) {
	// Not parallel: the goroutines serving connections are counted.
	r := newH2Rig(t, 1<<20)
	kinds := slices.DeleteFunc(slices.Clone(h2Kinds), func(k string) bool { return k == kindNoPreface })
	cls := openH2Flood(t, r, kinds, 20)
	// An HTTP/1.1 answer streams too, on the engine itself.
	h1, err := tls.Dial("tcp", r.addr, r.clientTLS("http/1.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	if _, err := io.WriteString(h1, "GET /events HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	h1r := bufio.NewReader(h1)
	if _, err := h1r.ReadString('\n'); err != nil {
		t.Fatalf("no answer over HTTP/1.1: %v", err)
	}
	h1Ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, h1r)
		close(h1Ended)
	}()
	waitFor(t, "the HTTP/1.1 stream", func() bool { return r.streams.Load() == int64(2*20+1) })
	// Those whose preface never comes are opened last, so that net/http's
	// bound of 10 s on a preface cannot pass before the shutdown (on a
	// loaded machine, under the race detector, the rest take seconds).
	for range 20 {
		cls = append(cls, r.openH2Kind(t, kindNoPreface))
	}
	waitFor(t, "all counted open", func() bool { return r.ln.open.Load() == int64(len(cls)+1) })

	// net/http closes an HTTP/2 connection told to go away a second after
	// (unless its client closes it first): half the grace is a bound for a
	// loaded machine.
	const grace = 8 * time.Second
	r.stopping()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- r.e.Shutdown(ctx) }()
	// Within half the grace, those that serve no request are closed.
	var quiet, busy []h2Client
	for _, c := range cls {
		if c.kind == kindStreaming || c.kind == kindStalled {
			busy = append(busy, c)
		} else {
			quiet = append(quiet, c)
		}
	}
	half := time.Now().Add(grace / 2)
	left := map[string]int{}
	for _, c := range quiet {
		select {
		case <-c.ended:
			continue
		default: // once half passed, one that ended is not counted left by chance
		}
		select {
		case <-c.ended:
			continue
		case <-time.After(time.Until(half)):
		}
		left[c.kind]++
	}
	if len(left) > 0 {
		t.Errorf("connections serving no request still open %v into Shutdown, beside answers streaming, by kind: %v",
			grace/2, left)
	}
	for _, c := range busy {
		select {
		case <-c.ended:
			t.Fatalf("a connection of kind %q ended while Shutdown let its answer stream", c.kind)
		default:
		}
	}
	if err := <-shut; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown returned %v with answers streaming past its deadline, want %v", err, context.DeadlineExceeded)
	}
	if err := r.e.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	endedAll(t, cls)
	select {
	case <-h1Ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the HTTP/1.1 stream went on after Close")
	}
	r.settled(t, "after Shutdown and Close")
	if err := <-r.served; err != nil {
		t.Fatal(err)
	}
}

// TestShutdownEndsHTTP2BeforeTheirPreface: Shutdown closes at once the
// connections over TLS that chose HTTP/2 by ALPN and sent nothing after
// their handshake (net/http's HTTP/2 server reads a connection's preface
// before anything else, the GOAWAY of its Shutdown included, and waits 10 s
// for it), beside idle HTTP/2 connections, which are told to go away and
// closed about a second after (net/http's wait for their clients to close
// first); with nothing in flight Shutdown returns then, its deadline a
// minute away.
func TestShutdownEndsHTTP2BeforeTheirPreface(t *testing.T) {
	// Not parallel: the goroutines serving connections are counted.
	r := newH2Rig(t, 1<<20)
	const n = 20
	// Those whose preface never comes last, so that net/http's bound on it
	// cannot pass before the shutdown.
	cls := openH2Flood(t, r, []string{kindIdle, kindNoPreface}, n)
	r.stopping()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- r.e.Shutdown(ctx) }()
	// 5 s: a bound for a loaded machine, short of the 10 s net/http waits
	// for a preface.
	const bound = 5 * time.Second
	type end struct {
		kind string
		at   time.Duration
	}
	ends := make(chan end, len(cls))
	for _, c := range cls {
		go func() {
			<-c.ended
			ends <- end{c.kind, time.Since(start)}
		}()
	}
	late := map[string]int{}
	for _, c := range cls {
		late[c.kind]++
	}
	last := map[string]time.Duration{}
	deadline := time.After(bound)
collect:
	for range cls {
		select {
		case e := <-ends:
			late[e.kind]--
			if late[e.kind] == 0 {
				delete(late, e.kind)
			}
			last[e.kind] = max(last[e.kind], e.at.Round(time.Millisecond))
		case <-deadline:
			break collect
		}
	}
	t.Logf("the last closed of each kind, into Shutdown: %v", last)
	if len(late) > 0 {
		t.Errorf("connections still open %v into Shutdown, with nothing in flight, by kind: %v", bound, late)
	}
	select {
	case err := <-shut:
		t.Logf("Shutdown returned %v in", time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Until(start.Add(bound))):
		err := <-shut
		t.Errorf("Shutdown returned %v in (%v), with nothing in flight: want within %v",
			time.Since(start).Round(time.Millisecond), err, bound)
	}
	endedAll(t, cls)
	r.settled(t, "after Shutdown")
	if err := <-r.served; err != nil {
		t.Fatal(err)
	}
}

// TestHTTP2OverTLSFloodGivesPlacesBack: a flood of HTTP/2 connections over
// TLS that their clients close at random points (before or during the
// handshake, before or after the preface, during an event stream) past the
// cap on connections leaves no connection counted open, held by the
// engine or served, and no upstream answer running; the cap's places are
// all free after it: as many connections as it allows are served at once.
func TestHTTP2OverTLSFloodGivesPlacesBack(t *testing.T) {
	// Not parallel: the goroutines serving connections are counted.
	const (
		max     = 8
		workers = 16
		each    = 25
	)
	r := newH2Rig(t, max)
	var wg sync.WaitGroup
	var served atomic.Int64
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 65))
			for range each {
				if floodOnce(r, rnd) {
					served.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("flood: %d connections, %d streams served, %d shed past the cap of %d, at most %d open at once",
		workers*each, served.Load(), r.ln.shed.Load(), max, r.ln.peak.Load())
	if r.ln.peak.Load() != max {
		t.Fatalf("at most %d connections open at once during the flood: the cap of %d was never reached", r.ln.peak.Load(), max)
	}
	r.settled(t, "after the flood")

	// Every place is free: max connections at once, each served.
	shed := r.ln.shed.Load()
	var conns []*http2.ClientConn
	for i := range max {
		raw, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := r.handshakeH2(raw)
		if err != nil {
			raw.Close()
			t.Fatalf("connection %d of %d after the flood: %v (%d shed since)", i+1, max, err, r.ln.shed.Load()-shed)
		}
		res, cc, err := openH2Stream(tc, "/events")
		if err != nil {
			tc.Close()
			t.Fatalf("connection %d of %d after the flood: %v", i+1, max, err)
		}
		res.Body.Close()
		conns = append(conns, cc)
	}
	if n := r.ln.shed.Load() - shed; n != 0 {
		t.Fatalf("%d of %d connections shed after the flood", n, max)
	}
	for _, cc := range conns {
		cc.Close()
	}
	r.stopping()
	if err := r.e.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	r.settled(t, "after Close")
	if err := <-r.served; err != nil {
		t.Fatal(err)
	}
}

// floodOnce opens one connection to r and closes it at a point rnd picks;
// it reports whether an event stream was served on it.
func floodOnce(r *h2Rig, rnd *rand.Rand) bool {
	raw, err := net.Dial("tcp", r.addr)
	if err != nil {
		return false
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(20 * time.Second)) // a shed connection's handshake fails
	switch rnd.IntN(5) {
	case 0: // before the handshake
		return false
	case 1: // during it
		_, _ = raw.Write([]byte{22, 3, 1, 0, 200, 1})
		return false
	}
	tc, err := r.handshakeH2(raw)
	if err != nil {
		return false
	}
	switch rnd.IntN(3) {
	case 0: // after the handshake
		return false
	case 1: // after the preface and settings
		_, _ = io.WriteString(tc, http2.ClientPreface)
		_ = http2.NewFramer(tc, nil).WriteSettings()
		return false
	}
	res, cc, err := openH2Stream(tc, "/events")
	if err != nil {
		return false
	}
	// During the stream, a few events in.
	br := bufio.NewReader(res.Body)
	for range rnd.IntN(3) {
		if _, err := br.ReadString('\n'); err != nil {
			break
		}
	}
	_ = raw.Close()
	cc.Close()
	return true
}
