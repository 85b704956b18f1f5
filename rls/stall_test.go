package rls

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// h2Client speaks HTTP/2 to a gRPC server by hand, as a client that
// leaves its calls unfinished does: it opens calls, sends what it
// chooses of them, and reports how the server ended each.
type h2Client struct {
	c  net.Conn
	mu sync.Mutex // guards fr's writes, enc and hb
	fr *http2.Framer
	hb bytes.Buffer
	hp *hpack.Encoder

	events chan h2Event // each call's end, in the order read
	gone   chan error   // the read loop's end
	away   chan string  // the GOAWAY's error code and debug data, if one came
}

// h2Event is how the server ended a call: its grpc-status from the
// trailers, or the code of a RST_STREAM (status -1 then).
type h2Event struct {
	stream uint32
	status int
	rst    http2.ErrCode
}

// dialH2 connects to addr, sends the preface and SETTINGS, and reads the
// server's frames until the connection ends, answering its SETTINGS and
// PINGs.
func dialH2(t *testing.T, addr string) *h2Client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A bound for failing only.
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	h := &h2Client{c: c, fr: http2.NewFramer(c, c), events: make(chan h2Event, 4096), gone: make(chan error, 1),
		away: make(chan string, 1)}
	h.hp = hpack.NewEncoder(&h.hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	go h.read()
	return h
}

func (h *h2Client) read() {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.gone <- err
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.mu.Lock()
				_ = h.fr.WriteSettingsAck()
				h.mu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.mu.Lock()
				_ = h.fr.WritePing(true, f.Data)
				h.mu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				st, err := strconv.Atoi(f.PseudoValue("status"))
				if v := f.Fields; len(v) > 0 {
					for _, hf := range v {
						if hf.Name == "grpc-status" {
							st, err = strconv.Atoi(hf.Value)
						}
					}
				}
				if err != nil {
					st = -2
				}
				h.events <- h2Event{stream: f.StreamID, status: st}
			}
		case *http2.RSTStreamFrame:
			h.events <- h2Event{stream: f.StreamID, status: -1, rst: f.ErrCode}
		case *http2.GoAwayFrame:
			select {
			case h.away <- f.ErrCode.String() + " " + string(f.DebugData()):
			default:
			}
		}
	}
}

// open starts call id of method: its HEADERS, and then data, if any.
func (h *h2Client) open(t *testing.T, id uint32, method string, data []byte, end bool) {
	t.Helper()
	err := h.headers(id, callFields(method), end && data == nil)
	if err == nil && data != nil {
		h.mu.Lock()
		err = h.fr.WriteData(id, end, data)
		h.mu.Unlock()
	}
	if err != nil {
		t.Fatalf("call %d: %v", id, err)
	}
}

// callFields are the header fields of a call of method.
func callFields(method string) [][2]string {
	return [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "rls"},
		{"content-type", "application/grpc"}, {"te", "trailers"}}
}

// headers opens stream id with a HEADERS frame of fields, ending the
// stream if end.
func (h *h2Client) headers(id uint32, fields [][2]string, end bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hb.Reset()
	for _, kv := range fields {
		_ = h.hp.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true, EndStream: end})
}

// grpcPrefix is the prefix of a gRPC message of n bytes, uncompressed.
func grpcPrefix(n uint32) []byte {
	b := make([]byte, 5)
	binary.BigEndian.PutUint32(b[1:], n)
	return b
}

// basicServer starts a Server of the basic config with so, on an
// embedded store closed when t ends, and returns it with what start
// returns.
func basicServer(t *testing.T, so ServerOptions) (srv *Server, addr string, stop context.CancelFunc, served <-chan error) {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err = NewServer(New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{}), so)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, served = start(t, srv)
	return srv, addr, stop, served
}

// rawH2 connects to addr, with a deadline bound from now unless bound is
// 0, and sends the HTTP/2 preface and an empty SETTINGS; the connection
// is closed when t ends.
func rawH2(t *testing.T, addr string, bound time.Duration) (net.Conn, *http2.Framer) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if bound != 0 {
		_ = c.SetDeadline(time.Now().Add(bound))
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}

func boundedServer(t *testing.T, so ServerOptions) string {
	t.Helper()
	_, addr, stop, served := basicServer(t, so)
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return addr
}

// TestStalledCallsEnd: a client that opens calls and never sends their
// messages holds at most DefaultMaxConcurrentStreams of them on a
// connection (the rest are refused), and each ends with DEADLINE_EXCEEDED
// at the server's CallTimeout. gRPC waits for a message for ever: 1,024
// such calls a connection, each holding a goroutine (about 15 KiB), stayed
// until the connection closed, and a client that sent part of a message
// had it read into memory up to 4 MiB.
func TestStalledCallsEnd(t *testing.T) {
	addr := boundedServer(t, ServerOptions{CallTimeout: 500 * time.Millisecond})
	h := dialH2(t, addr)
	const calls = 300
	for i := range calls {
		// Half send nothing of their message, half a part of it.
		var data []byte
		if i%2 == 1 {
			data = append(grpcPrefix(1000), make([]byte, 100)...)
		}
		h.open(t, uint32(2*i+1), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, data, false)
	}
	refused, ended := 0, map[uint32]h2Event{}
	wait := time.After(30 * time.Second)
	for refused+len(ended) < calls {
		select {
		case e := <-h.events:
			if e.rst == http2.ErrCodeRefusedStream {
				refused++
			} else if _, ok := ended[e.stream]; !ok {
				ended[e.stream] = e
			}
		case err := <-h.gone:
			t.Fatalf("the connection ended (%v) with %d calls refused and %d ended", err, refused, len(ended))
		case <-wait:
			t.Fatalf("after 30 s, %d of %d calls refused and %d ended: the others are held for ever", refused, calls, len(ended))
		}
	}
	if held := calls - refused; held > DefaultMaxConcurrentStreams {
		t.Errorf("%d calls held on one connection; want at most %d", held, DefaultMaxConcurrentStreams)
	}
	for id, e := range ended {
		// DEADLINE_EXCEEDED in the trailers; a reset after them is
		// counted once, by the first of the two.
		if e.status != 4 {
			t.Errorf("call %d ended with status %d (reset %v); want DEADLINE_EXCEEDED (4)", id, e.status, e.rst)
			break
		}
	}
}

// TestLongRequestRefusedUnread: a call that announces a message longer
// than MaxRequestSize ends at once with RESOURCE_EXHAUSTED (gRPC's bound
// is 4 MiB, and it reads what comes of such a message into memory).
func TestLongRequestRefusedUnread(t *testing.T) {
	addr := boundedServer(t, ServerOptions{CallTimeout: -1})
	h := dialH2(t, addr)
	h.open(t, 1, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, append(grpcPrefix(DefaultMaxRequestSize+1), make([]byte, 1000)...), false)
	h.open(t, 3, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, grpcPrefix(4<<20-1), false)
	got := map[uint32]int{}
	wait := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case e := <-h.events:
			if _, ok := got[e.stream]; !ok {
				got[e.stream] = e.status
			}
		case err := <-h.gone:
			t.Fatalf("the connection ended: %v", err)
		case <-wait:
			t.Fatalf("after 30 s the calls announcing long messages are still open: %v", got)
		}
	}
	for id, st := range got {
		if st != 8 {
			t.Errorf("call %d ended with status %d; want RESOURCE_EXHAUSTED (8)", id, st)
		}
	}
}

// TestHealthWatchOutlivesCallTimeout: CallTimeout bounds the calls a
// client makes and ends, not the health service's Watch, which a client
// keeps open to hear of changes.
func TestHealthWatchOutlivesCallTimeout(t *testing.T) {
	addr := boundedServer(t, ServerOptions{CallTimeout: 100 * time.Millisecond})
	h := dialH2(t, addr)
	h.open(t, 1, healthpb.Health_Watch_FullMethodName, grpcPrefix(0), true)
	// A Check on the same connection is answered, not cut.
	h.open(t, 3, healthpb.Health_Check_FullMethodName, grpcPrefix(0), true)
	watch := time.After(time.Second) // ten times CallTimeout
	for {
		select {
		case e := <-h.events:
			if e.stream == 1 {
				t.Fatalf("the Watch ended (status %d, reset %v) after less than a second", e.status, e.rst)
			}
			if e.status != 0 {
				t.Errorf("the Check ended with status %d (reset %v); want OK", e.status, e.rst)
			}
		case err := <-h.gone:
			t.Fatalf("the connection ended: %v", err)
		case <-watch:
			return
		}
	}
}

// TestSecondTapHandleIsAnError: ExtraOptions carrying a tap handle beside
// CallTimeout's is refused with an error, where gRPC would panic.
func TestSecondTapHandleIsAnError(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{})
	tapped := ServerOptions{ExtraOptions: []grpc.ServerOption{grpc.InTapHandle(boundCalls(time.Second))}}
	if _, err := NewServer(svc, tapped); err == nil {
		t.Error("a second tap handle was taken")
	}
	tapped.CallTimeout = -1
	srv, err := NewServer(svc, tapped)
	if err != nil {
		t.Fatalf("a tap handle with CallTimeout off: %v", err)
	}
	srv.GRPC.Stop()
}

// closeWatch is a listener that reports the remote address of each
// connection the server closes.
type closeWatch struct {
	net.Listener
	closed chan string
}

func (l *closeWatch) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// Small send buffers: a client that reads nothing blocks the
		// server's writes after a few answers, however few calls it got
		// through on a loaded machine (its own sends are held back when
		// the server falls behind).
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return &watchedConn{Conn: c, closed: l.closed}, nil
}

type watchedConn struct {
	net.Conn
	once   sync.Once
	closed chan string
}

func (c *watchedConn) Close() error {
	c.once.Do(func() { c.closed <- c.RemoteAddr().String() })
	return c.Conn.Close()
}

// TestClientThatNeverReadsIsCut: a client that sends calls and never reads
// their answers holds its connection, and the answers and calls queued on
// it, for WriteTimeout at most; the server then closes it. A client that
// reads, however long it waits between calls, keeps its connection.
// Without the bound such a client held its connection (and about 2 MB of
// queued calls) until the keepalive ping, two hours later, long past the
// call bound.
func TestClientThatNeverReadsIsCut(t *testing.T) {
	const stall = 500 * time.Millisecond
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// Dynamic metadata echoes a descriptor's value in its answer: long
	// answers fill the socket's buffers in a few calls.
	svc := New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{DynamicMetadata: true})
	srv, err := NewServer(svc, ServerOptions{WriteTimeout: stall})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &closeWatch{Listener: raw, closed: make(chan string, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := raw.Addr().String()

	// A client that reads keeps its connection across pauses longer than
	// the bound.
	conn := dial(t, addr)
	defer conn.Close()
	rl := rlsv3.NewRateLimitServiceClient(conn)
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * stall)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := rl.ShouldRateLimit(cctx, req("d", desc("user", "reader")))
		ccancel()
		if err != nil {
			t.Fatalf("call %d of a client that reads: %v", i, err)
		}
	}
	select {
	case a := <-ln.closed:
		t.Fatalf("the connection of a client that reads (%s) was closed", a)
	default:
	}

	// A client that never reads.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(req("d", desc("user", strings.Repeat("v", 32<<10))))
	if err != nil {
		t.Fatal(err)
	}
	data := append(grpcPrefix(uint32(len(msg))), msg...)
	var hb bytes.Buffer
	hp := hpack.NewEncoder(&hb)
	sent := 0
	for i := range 2000 {
		// A bound for the test only: the server stops reading once
		// its answers are stuck.
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		hb.Reset()
		for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", rlsv3.RateLimitService_ShouldRateLimit_FullMethodName},
			{":authority", "rls"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			_ = hp.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		id := uint32(2*i + 1)
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}) != nil ||
			writeData(fr, id, data) != nil {
			break
		}
		sent++
	}
	mine := c.LocalAddr().String()
	wait := time.After(30 * time.Second)
	for {
		select {
		case a := <-ln.closed:
			if a == mine {
				return
			}
			t.Fatalf("the connection of a client that reads (%s) was closed", a)
		case <-wait:
			t.Fatalf("30 s after a client sent %d calls and read none of their answers, the server still holds its connection (write bound %v)", sent, stall)
		}
	}
}

// writeData sends data on stream id in frames of HTTP/2's default largest
// size, the last one ending the stream.
func writeData(fr *http2.Framer, id uint32, data []byte) error {
	const most = 16 << 10
	for len(data) > most {
		if err := fr.WriteData(id, false, data[:most]); err != nil {
			return err
		}
		data = data[most:]
	}
	return fr.WriteData(id, true, data)
}
