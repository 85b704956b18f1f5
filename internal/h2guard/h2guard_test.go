package h2guard

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/floodgate/floodgate/internal/testcerts"
)

// serve serves h on loopback with net/http, HTTP/1.1 and h2c, HTTP/2 over
// TLS too when tc is not nil, its HTTP/2 through Install, and returns the
// address.
func serve(t *testing.T, h http.Handler, tc *tls.Config) string {
	t.Helper()
	return serveCuts(t, h, tc, nil)
}

// serveCuts is serve with its connections cut counted and logged by cuts.
func serveCuts(t *testing.T, h http.Handler, tc *tls.Config, cuts *Cuts) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, ln, h, tc, cuts)
}

// serveOn is serveCuts on ln.
func serveOn(t *testing.T, ln net.Listener, h http.Handler, tc *tls.Config, cuts *Cuts) string {
	t.Helper()
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols), TLSConfig: tc}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if tc != nil {
		srv.Protocols.SetHTTP2(true)
		ln = tls.NewListener(ln, tc)
	}
	if err := Install(srv, cuts); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// serverTLS returns a server's TLS configuration offering h2 and the
// client's trusting it.
func serverTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	ca, err := testcerts.NewCA(t.TempDir(), "h2guard")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Server("server")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		&tls.Config{RootCAs: ca.Pool, ServerName: "localhost", NextProtos: []string{"h2"}}
}

// h2Client is a raw HTTP/2 client on its own connection.
type h2Client struct {
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

// dialH2 dials addr, over TLS when tc is not nil, and starts an HTTP/2
// client there that sends settings.
func dialH2(t *testing.T, addr string, tc *tls.Config, settings ...http2.Setting) *h2Client {
	t.Helper()
	if tc != nil {
		c, err := tls.Dial("tcp", addr, tc)
		if err != nil {
			t.Fatal(err)
		}
		return startH2(t, c, settings...)
	}
	return dialH2With(t, addr, &net.Dialer{}, settings...)
}

// dialH2With is dialH2 over h2c, dialed by d.
func dialH2With(t *testing.T, addr string, d *net.Dialer, settings ...http2.Setting) *h2Client {
	t.Helper()
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return startH2(t, c, settings...)
}

// startH2 starts an HTTP/2 client on c.
func startH2(t *testing.T, c net.Conn, settings ...http2.Setting) *h2Client {
	t.Helper()
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h := &h2Client{c: c, fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&h.buf)
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return h
}

// request opens stream id with a request for path, its body to come unless
// end.
func (h *h2Client) request(id uint32, path string, end bool) error {
	return h.requestWith(id, path, end)
}

// requestWith is request with header fields of its own after the pseudo
// ones.
func (h *h2Client) requestWith(id uint32, path string, end bool, fields ...[2]string) error {
	h.buf.Reset()
	all := append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "localhost"}}, fields...)
	for _, f := range all {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.buf.Bytes(), EndHeaders: true, EndStream: end})
}

// bigField is a header field that HPACK's table (4,096 bytes) holds alone:
// named by one byte once it is there.
var bigField = [2]string{"x-big", strings.Repeat("b", 4000)}

// oversized opens stream id with a request whose header fields pass
// net/http's default bound of 1 MiB: bigField 270 times, a frame of under
// 300 bytes once the table holds it. The server answers 431 itself.
func (h *h2Client) oversized(id uint32) error {
	fields := make([][2]string, 270)
	for i := range fields {
		fields[i] = bigField
	}
	return h.requestWith(id, "/", true, fields...)
}

// errEnough ends a flood that was sent in full.
var errEnough = errors.New("the flood was sent in full")

// floods are the frames that are not requests a client may send over and
// over; each writes the i-th.
var floods = map[string]func(h *h2Client, i int) error{
	"PING":                 func(h *h2Client, i int) error { return h.fr.WritePing(false, [8]byte{byte(i)}) },
	"SETTINGS":             func(h *h2Client, i int) error { return h.fr.WriteSettings() },
	"WINDOW_UPDATE":        func(h *h2Client, i int) error { return h.fr.WriteWindowUpdate(0, 1) },
	"stream WINDOW_UPDATE": func(h *h2Client, i int) error { return h.fr.WriteWindowUpdate(1, 1) },
	"PRIORITY": func(h *h2Client, i int) error {
		return h.fr.WritePriority(uint32(1001+2*i), http2.PriorityParam{Weight: 1})
	},
	"empty DATA":   func(h *h2Client, i int) error { return h.fr.WriteData(1, false, nil) },
	"padding DATA": func(h *h2Client, i int) error { return h.fr.WriteDataPadded(1, false, nil, []byte{0, 0}) },
	"unknown type": func(h *h2Client, i int) error { return h.fr.WriteRawFrame(0x77, 0, 0, []byte("x")) },
	// A byte at a time on a stream answered, each refused with a
	// RST_STREAM.
	"DATA on a closed stream": func(h *h2Client, i int) error {
		if i == 0 {
			if err := h.request(3, "/", true); err != nil {
				return err
			}
		}
		return h.fr.WriteData(3, false, []byte{0})
	},
	// Streams past the 250 the server takes at once, each refused with a
	// RST_STREAM: no handler runs, no limit sees them.
	"refused HEADERS": func(h *h2Client, i int) error {
		if i == 0 {
			for id := uint32(3); id < 3+2*250; id += 2 {
				if err := h.request(id, "/", false); err != nil {
					return err
				}
			}
		}
		return h.request(uint32(3+2*250+2*i), "/", true)
	},
	// Requests net/http refuses itself, no handler run and no limit
	// seeing them: headers past the server's bound (431), each named by
	// a byte in the table of HPACK once it holds them, and a header
	// HTTP/2 forbids (400). 5,000 of each: the first thousand spend the
	// budget.
	"431 HEADERS": func(h *h2Client, i int) error {
		if i >= 5000 {
			return errEnough
		}
		return h.oversized(uint32(3 + 2*i))
	},
	"400 HEADERS": func(h *h2Client, i int) error {
		if i >= 5000 {
			return errEnough
		}
		return h.requestWith(uint32(3+2*i), "/", true, [2]string{"connection", "close"})
	},
	"empty CONTINUATION": func(h *h2Client, i int) error {
		if i == 0 {
			h.buf.Reset()
			_ = h.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: h.buf.Bytes()}); err != nil {
				return err
			}
		}
		return h.fr.WriteContinuation(3, false, nil)
	},
}

// TestFloodsAreCut: a client that sends 100,000 frames that are not
// requests of one kind on one connection, reading what the server
// answers, gets a GOAWAY with ENHANCE_YOUR_CALM (unless the close's reset
// overtakes it) and its connection closed, its cut counted, once its
// budget is spent, over h2c and over TLS. Go's HTTP/2 server alone answered all 100,000 PINGs
// (and SETTINGS), refused every stream past those it takes at once, and
// took every other frame, its connection kept. Before 2026-12-07 each
// request net/http answers itself (431, 400) earned the budget as a
// request the handler serves: 5,000 of each were answered, never cut.
func TestFloodsAreCut(t *testing.T) {
	stc, ctc := serverTLS(t)
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	for _, over := range []string{"h2c", "TLS"} {
		var tc *tls.Config
		if over == "TLS" {
			tc = ctc
		}
		for kind, send := range floods {
			t.Run(over+"/"+kind, func(t *testing.T) {
				cuts := &Cuts{}
				addr := serveCuts(t, hold, map[string]*tls.Config{"TLS": stc}[over], cuts)
				if acked := floodUntilCut(t, dialH2(t, addr, tc), send); acked >= Burst+100 {
					t.Errorf("%d answers before the end, past a budget of %d", acked, Burst)
				}
				count(t, cuts, floodKinds[kind], 1)
			})
		}
	}
}

// floodUntilCut opens a request on h's stream 1, its body still to come,
// then sends 100,000 frames with send, reading what the server answers,
// and fails t unless the connection ends, within 10 s of the last, with a
// GOAWAY with ENHANCE_YOUR_CALM or, the GOAWAY lost, its close. Whether
// the server's guard cut it, not net/http, the cut's count tells. It
// returns how many PINGs and SETTINGS were acknowledged.
func floodUntilCut(t *testing.T, h *h2Client, send func(h *h2Client, i int) error) int {
	t.Helper()
	// A request, its body still to come, on stream 1.
	if err := h.request(1, "/", false); err != nil {
		t.Fatal(err)
	}
	end := make(chan string, 1)
	acks := make(chan int, 1)
	go func() {
		rd := http2.NewFramer(nil, h.c)
		n := 0
		defer func() { acks <- n }()
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				end <- "closed without a GOAWAY: " + err.Error()
				return
			}
			switch f := f.(type) {
			case *http2.PingFrame:
				n++
			case *http2.SettingsFrame:
				if f.IsAck() {
					n++
				}
			case *http2.GoAwayFrame:
				end <- f.ErrCode.String()
				_, _ = io.Copy(io.Discard, h.c)
				return
			}
		}
	}()
	const n = 100000
	sent := 0
	for ; sent < n; sent++ {
		if send(h, sent) != nil {
			break
		}
	}
	_ = h.c.SetDeadline(time.Now().Add(10 * time.Second))
	// The GOAWAY may be lost: the server closes with the client's
	// frames unread, which resets the connection, however many the
	// client had still to send (none, when the sockets' buffers took
	// them all before the cut); or the server's answers stood cut in the
	// middle of a frame, and the GOAWAY could not follow them.
	got := <-end
	if got != "ENHANCE_YOUR_CALM" && !strings.Contains(got, "reset") && !strings.Contains(got, "EOF") {
		t.Fatalf("%d of %d frames sent; the connection ended with %s", sent, n, got)
	}
	return <-acks
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for a log.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// floodKinds is the kind each flood of floods is counted under.
var floodKinds = map[string]Kind{
	"PING": KindPing, "SETTINGS": KindSettings, "WINDOW_UPDATE": KindWindowUpdate,
	"stream WINDOW_UPDATE": KindWindowUpdate, "PRIORITY": KindPriority, "empty DATA": KindEmptyData,
	"padding DATA": KindEmptyData, "unknown type": KindUnknown, "DATA on a closed stream": KindRefusedStream,
	"refused HEADERS": KindRefusedStream, "431 HEADERS": KindRefusedStream, "400 HEADERS": KindRefusedStream,
	"empty CONTINUATION": KindContinuation,
}

// count waits, 10 s at most, until cuts has counted want connections of
// kind k; the count follows the GOAWAY, which the client may read first.
func count(t *testing.T, cuts *Cuts, k Kind, want int64) {
	t.Helper()
	for i := 0; cuts.Count(k) < want && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := cuts.Count(k); got != want {
		t.Fatalf("%d connections counted as cut by %s frames, want %d", got, k, want)
	}
}

// TestCutsAreCountedAndLogged: each connection cut for spending its budget
// is counted under the kind of frame that spent most of it, and logged as
// a warning naming its client's address and that kind; cuts past the
// first in a second are held back from the log, and the next line that
// passes says how many were. Before, a cut left no trace.
func TestCutsAreCountedAndLogged(t *testing.T) {
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	for kind, send := range floods {
		t.Run(kind, func(t *testing.T) {
			var log syncBuffer
			cuts := &Cuts{Log: slog.New(slog.NewTextHandler(&log, nil))}
			addr := serveCuts(t, hold, nil, cuts)
			h := dialH2(t, addr, nil)
			floodUntilCut(t, h, send)
			want := floodKinds[kind]
			count(t, cuts, want, 1)
			for k := range NumKinds {
				if n := cuts.Count(k); k != want && n != 0 {
					t.Errorf("%d counted as cut by %s frames too", n, k)
				}
			}
			line := log.String()
			for _, s := range []string{"level=WARN", "client=" + h.c.LocalAddr().String(), "frame=" + want.String(), "not_logged_since=0"} {
				if !strings.Contains(line, s) {
					t.Errorf("the log %q does not say %s", line, s)
				}
			}
		})
	}
	t.Run("held back", func(t *testing.T) {
		stc, ctc := serverTLS(t)
		var log syncBuffer
		cuts := &Cuts{Log: slog.New(slog.NewTextHandler(&log, nil))}
		addr := serveCuts(t, hold, stc, cuts)
		// Three floods over TLS, one after the other: as many lines as
		// seconds passed, at most, and the count whole.
		start := time.Now()
		for i := range 3 {
			floodUntilCut(t, dialH2(t, addr, ctc), floods["PING"])
			count(t, cuts, KindPing, int64(i+1))
		}
		lines := strings.Count(log.String(), "h2guard: HTTP/2 connection cut")
		if lines < 1 || lines > 1+int(time.Since(start)/time.Second) {
			t.Fatalf("%d lines for 3 cuts in %v:\n%s", lines, time.Since(start), log.String())
		}
	})
}

// TestHeavyTrafficIsNotCut: clients that make the server work hard with
// frames that are not requests but for what they asked are never cut: a
// 64 MiB download through a window of 1 KiB granted back after each DATA
// frame, on the stream and the connection; 2,000 requests on one
// connection with a PING after each; 50 uploads of 63 KiB in frames of
// 1 KiB, each answered before its body was read, the rest of its frames
// refused; a 16 MiB upload and many streams at once through net/http's
// client; over h2c and over TLS.
func TestHeavyTrafficIsNotCut(t *testing.T) {
	stc, ctc := serverTLS(t)
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		if r.URL.Path != "/big" {
			fmt.Fprintf(w, "%d", n)
			return
		}
		for range (64 << 20) / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	for _, over := range []string{"h2c", "TLS"} {
		var tc *tls.Config
		if over == "TLS" {
			tc = ctc
		}
		addr := serve(t, h, map[string]*tls.Config{"TLS": stc}[over])
		t.Run(over+"/download", func(t *testing.T) {
			c := dialH2(t, addr, tc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 10})
			if err := c.request(1, "/big", true); err != nil {
				t.Fatal(err)
			}
			got := 0
			for {
				f, err := c.fr.ReadFrame()
				if err != nil {
					t.Fatalf("after %d bytes: %v", got, err)
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					t.Fatalf("after %d bytes: GOAWAY %v", got, g.ErrCode)
				}
				d, ok := f.(*http2.DataFrame)
				if !ok {
					continue
				}
				got += len(d.Data())
				if d.StreamEnded() {
					break
				}
				if n := uint32(len(d.Data())); n > 0 {
					if err := c.fr.WriteWindowUpdate(1, n); err != nil {
						t.Fatal(err)
					}
					if err := c.fr.WriteWindowUpdate(0, n); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got != 64<<20 {
				t.Fatalf("got %d bytes", got)
			}
		})
		t.Run(over+"/requests and pings", func(t *testing.T) {
			c := dialH2(t, addr, tc)
			for i := range 2000 {
				id := uint32(1 + 2*i)
				if err := c.request(id, "/", true); err != nil {
					t.Fatal(err)
				}
				if err := c.fr.WritePing(false, [8]byte{1}); err != nil {
					t.Fatal(err)
				}
				for ended := false; !ended; {
					f, err := c.fr.ReadFrame()
					if err != nil {
						t.Fatalf("request %d: %v", i+1, err)
					}
					switch f := f.(type) {
					case *http2.GoAwayFrame:
						t.Fatalf("request %d: GOAWAY %v", i+1, f.ErrCode)
					case *http2.SettingsFrame:
						if !f.IsAck() {
							_ = c.fr.WriteSettingsAck()
						}
					case *http2.DataFrame:
						ended = f.StreamEnded() && f.StreamID == id
					case *http2.HeadersFrame:
						ended = f.StreamEnded() && f.StreamID == id
					}
				}
			}
		})
		t.Run(over+"/uploads answered before their body", func(t *testing.T) {
			c := dialH2(t, addr, tc)
			window := 65535 // the connection's, for the client's DATA
			chunk := make([]byte, 1<<10)
			for i := range 50 {
				id := uint32(1 + 2*i)
				if err := c.request(id, "/refuse", false); err != nil {
					t.Fatal(err)
				}
				answered := false
				read := func() {
					f, err := c.fr.ReadFrame()
					if err != nil {
						t.Fatalf("upload %d: %v", i+1, err)
					}
					switch f := f.(type) {
					case *http2.GoAwayFrame:
						t.Fatalf("upload %d: GOAWAY %v", i+1, f.ErrCode)
					case *http2.WindowUpdateFrame:
						if f.StreamID == 0 {
							window += int(f.Increment)
						}
					case *http2.HeadersFrame:
						answered = answered || f.StreamID == id
					}
				}
				// 63 KiB, within the stream's first window, sent as the
				// answer comes: most of it after the stream was closed.
				for range 63 {
					for window < len(chunk) {
						read()
					}
					if err := c.fr.WriteData(id, false, chunk); err != nil {
						t.Fatal(err)
					}
					window -= len(chunk)
				}
				for !answered {
					read()
				}
			}
		})
		t.Run(over+"/net/http client", func(t *testing.T) {
			var dials atomic.Int32
			tr := &http.Transport{Protocols: new(http.Protocols), TLSClientConfig: tc,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}}
			scheme := "https"
			if tc == nil {
				tr.Protocols.SetUnencryptedHTTP2(true)
				scheme = "http"
			} else {
				tr.Protocols.SetHTTP2(true)
			}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr}
			res, err := cl.Post(scheme+"://"+addr+"/", "text/plain", io.LimitReader(zeros{}, 16<<20))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(b) != fmt.Sprint(16<<20) || res.ProtoMajor != 2 {
				t.Fatalf("upload: HTTP/%d %q", res.ProtoMajor, b)
			}
			errs := make(chan error, 200)
			for range 200 {
				go func() {
					res, err := cl.Post(scheme+"://"+addr+"/", "text/plain", strings.NewReader("hi"))
					if err == nil {
						_, err = io.Copy(io.Discard, res.Body)
						res.Body.Close()
					}
					errs <- err
				}()
			}
			for range 200 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if n := dials.Load(); n != 1 {
				t.Fatalf("the client dialed %d times: its connection was cut", n)
			}
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestBudgetComesBack: the budget spent comes back at PerSecond a second
// up to Burst, so a gRPC client's keepalive PING every 10 s for a day is
// never cut, and one flooding is cut at Burst.
func TestBudgetComesBack(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(t time.Time) func() time.Time { return func() time.Time { return t } }
	b := newBudget(t0)
	for i := range 24 * 360 {
		if !b.spend(at(t0.Add(time.Duration(i) * 10 * time.Second))) {
			t.Fatalf("keepalive PING %d cut", i+1)
		}
	}
	b = newBudget(t0)
	for i := range Burst {
		if !b.spend(at(t0)) {
			t.Fatalf("frame %d cut within the burst", i+1)
		}
	}
	if b.spend(at(t0.Add(time.Second / PerSecond / 2))) {
		t.Fatal("a frame past the burst was let through")
	}
	b = newBudget(t0)
	b.left.Store(-1)
	if !b.spend(at(t0.Add(time.Second))) || b.left.Load() != PerSecond-2 {
		t.Fatalf("after a second: %d left, want %d", b.left.Load(), PerSecond-2)
	}
	if got := b.refill(t0.Add(time.Hour)); got != Burst {
		t.Fatalf("after an hour: %d, want %d", got, Burst)
	}
	b.earn(5 * Burst)
	if got := b.refill(t0.Add(2 * time.Hour)); got != 6*Burst {
		t.Fatalf("earned: %d, want %d", got, 6*Burst)
	}
}
