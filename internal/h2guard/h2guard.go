package h2guard

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/internal/lograte"
)

// The budget of a connection's frames that are not requests (PING,
// SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM, GOAWAY, CONTINUATION,
// DATA that carries nothing, trailers, frames of unknown types, DATA on a
// stream the client ended). A browser sends a few dozen over a page's
// life, a gRPC client one PING each keepalive interval (10 s at the
// least), and a client taking a download one or two WINDOW_UPDATEs for
// each DATA frame it reads. A stream the server refuses or resets for the
// client's fault costs PerStream+1 (Conn.serverFrame). On a connection of
// NewHandled's or Install's, a stream earns only once its request reaches
// the server's handler (Conn.Handled): one the server answers itself
// (net/http's 431 for headers past the server's bound or 400 for a header
// HTTP/2 forbids, grpc-go's Unimplemented for a method no service has) or
// refuses costs its HEADERS frame.
const (
	// Burst is what a connection may send at once.
	Burst = 1000
	// PerSecond is what comes back each second, up to Burst.
	PerSecond = 10
	// PerStream is what each stream a client opens earns (on a
	// connection of NewHandled's or Install's, each stream whose request
	// reaches the server's handler).
	PerStream = 10
	// PerData is what each DATA frame the server sends earns, for the
	// WINDOW_UPDATEs that answer it, but the last of its stream's, which
	// no stream's WINDOW_UPDATE answers: the only one of a short answer,
	// whose stream has earned already, or of net/http's own 431.
	PerData = 4
)

// ErrCalm is the error a Conn's Read returns once its client has spent
// its budget.
var ErrCalm = errors.New("h2guard: too many HTTP/2 frames that are not requests")

// errPreface is the error a Conn's Read returns when the first bytes of
// a client whose preface it drops are not HTTP/2's preface.
var errPreface = errors.New("h2guard: the client's HTTP/2 preface is wrong")

// preface is what an HTTP/2 client sends first (RFC 9113 §3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Frame types, flags and error codes (RFC 9113 §6, §7).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
	flagAck           = 0x1
	flagEndStream     = 0x1
	flagPadded        = 0x8
	codeNoError       = 0x0
	codeProtocol      = 0x1
	codeFlowControl   = 0x3
	codeStreamClosed  = 0x5
	codeFrameSize     = 0x6
	codeRefusedStream = 0x7
	codeEnhanceCalm   = 0xb
	frameHeaderLength = 9
)

// Kind is a kind of frame that spends a connection's budget: the label
// under which a connection cut is counted, of the kind that spent most of
// its budget. The kinds are a fixed few, whatever frames a client sends.
type Kind uint8

// The kinds of frames that spend a budget.
const (
	KindPing         Kind = iota // PING, and their acknowledgements
	KindSettings                 // SETTINGS, and their acknowledgements
	KindWindowUpdate             // WINDOW_UPDATE
	KindPriority                 // PRIORITY
	KindRSTStream                // RST_STREAM the client sent
	KindEmptyData                // DATA that carries nothing and ends no stream
	KindContinuation             // CONTINUATION
	KindUnknown                  // frames of a type net/http's server does not know
	// KindRefusedStream is the server's RST_STREAM refusing a stream (past
	// those it takes at once, or for the client's breaking the protocol,
	// flow control or frame size) or a DATA frame on a stream closed, and
	// on a connection of NewHandled's or Install's a stream whose request
	// never reached the server's handler (answered 431 or 400 by net/http
	// itself, Unimplemented or 415 by grpc-go itself, or reset).
	KindRefusedStream
	KindOther // GOAWAY, PUSH_PROMISE, HEADERS that open no stream (trailers)
	// NumKinds is how many kinds there are: Kind(0) to NumKinds-1.
	NumKinds
)

var kindNames = [NumKinds]string{"ping", "settings", "window_update", "priority", "rst_stream",
	"empty_data", "continuation", "unknown", "refused_stream", "other"}

// String returns k's label: "ping", "settings", "window_update",
// "priority", "rst_stream", "empty_data", "continuation", "unknown",
// "refused_stream" or "other".
func (k Kind) String() string {
	if k >= NumKinds {
		return "other"
	}
	return kindNames[k]
}

// kindOf is the kind of a frame a client sent that spends the budget.
func kindOf(h header) Kind {
	switch h.typ {
	case framePing:
		return KindPing
	case frameSettings:
		return KindSettings
	case frameWindowUpdate:
		return KindWindowUpdate
	case framePriority:
		return KindPriority
	case frameRSTStream:
		return KindRSTStream
	case frameData:
		return KindEmptyData
	case frameContinuation:
		return KindContinuation
	}
	if h.typ > frameContinuation {
		return KindUnknown
	}
	return KindOther
}

// Cuts counts the connections its Conns cut, by the kind of frame that
// spent most of each one's budget, and logs each cut as a warning to Log,
// naming the client's address and that kind: at most one line a second,
// the next that passes saying how many were held back, so that a flood of
// connections cut cannot flood the log. Its zero value counts the cuts
// and logs none; it is safe for concurrent use.
type Cuts struct {
	// Log gets the warnings; nil logs none.
	Log *slog.Logger

	gate lograte.Gate
	n    [NumKinds]atomic.Int64
}

// Count returns how many connections were cut whose budget frames of kind
// k spent most of.
func (c *Cuts) Count(k Kind) int64 {
	if c == nil || k >= NumKinds {
		return 0
	}
	return c.n[k].Load()
}

// cut logs and counts the cut of a connection to client addr whose budget
// frames of kind k spent most of.
func (c *Cuts) cut(addr net.Addr, k Kind) {
	if c == nil {
		return
	}
	// Counted once logged: whoever reads the count finds the line.
	defer c.n[k].Add(1)
	if c.Log == nil {
		return
	}
	if held, ok := c.gate.Pass(time.Now()); ok {
		client := ""
		if addr != nil {
			client = addr.String()
		}
		c.Log.Warn("h2guard: HTTP/2 connection cut with a GOAWAY (ENHANCE_YOUR_CALM): too many frames that are not requests",
			"client", client, "frame", k.String(), "not_logged_since", held)
	}
}

// header is a frame's header, with what its payload's first bytes tell:
// for DATA, the bytes of data it carries (its payload but its padding);
// for RST_STREAM, its error code.
type header struct {
	length uint32
	typ    byte
	flags  byte
	stream uint32
	data   uint32 // DATA's
	code   uint32 // RST_STREAM's
}

// scanner follows the frames in one direction of a connection through the
// bytes that pass, telling each frame at its start, once its header is
// whole and, for a padded DATA frame and RST_STREAM, the first bytes of
// its payload too.
type scanner struct {
	buf  [frameHeaderLength]byte
	n    int    // bytes of buf had
	left uint32 // payload bytes of the current frame still to pass
	need int    // payload bytes still to have before the frame is told
	got  [4]byte
	gotN int
	cur  header
}

// feed passes p through s, calling frame for each frame whose start it
// holds.
func (s *scanner) feed(p []byte, frame func(h header)) {
	for len(p) > 0 {
		switch {
		case s.need > 0:
			k := copy(s.got[s.gotN:s.gotN+s.need], p)
			s.gotN += k
			s.need -= k
			s.left -= uint32(k)
			p = p[k:]
			if s.need > 0 {
				return
			}
			if s.cur.typ == frameData {
				s.cur.data = 0
				if pad := uint32(s.got[0]); s.cur.length > 1+pad {
					s.cur.data = s.cur.length - 1 - pad
				}
			} else {
				s.cur.code = binary.BigEndian.Uint32(s.got[:])
			}
			frame(s.cur)
		case s.left > 0:
			k := min(uint32(len(p)), s.left)
			s.left -= k
			p = p[k:]
		default:
			k := copy(s.buf[s.n:], p)
			s.n += k
			p = p[k:]
			if s.n < frameHeaderLength {
				return
			}
			s.n = 0
			s.cur = header{
				length: uint32(s.buf[0])<<16 | uint32(s.buf[1])<<8 | uint32(s.buf[2]),
				typ:    s.buf[3],
				flags:  s.buf[4],
				stream: binary.BigEndian.Uint32(s.buf[5:9]) & (1<<31 - 1),
			}
			s.left = s.cur.length
			s.gotN = 0
			switch {
			case s.cur.typ == frameData && s.cur.flags&flagPadded != 0 && s.cur.length > 0:
				s.need = 1
			case s.cur.typ == frameRSTStream && s.cur.length == 4:
				s.need = 4
			default:
				s.cur.data = s.cur.length
				frame(s.cur)
			}
		}
	}
}

// between reports whether s stands between two frames.
func (s *scanner) between() bool { return s.n == 0 && s.left == 0 }

// budget is what a connection may still send of frames that are not
// requests. The reader spends it and the writer adds to it, at once.
type budget struct {
	left atomic.Int64
	last time.Time // when it last came back with time; the reader's alone
}

func newBudget(now time.Time) *budget {
	b := &budget{last: now}
	b.left.Store(Burst)
	return b
}

// earn adds n.
func (b *budget) earn(n int64) { b.left.Add(n) }

// spend takes one frame and reports whether the budget held it, giving
// back, once it is spent, what came back with time by now.
func (b *budget) spend(now func() time.Time) bool {
	if b.left.Add(-1) >= 0 {
		return true
	}
	return b.refill(now()) >= 0
}

// spent reports whether the budget is spent, once what came back with
// time by now is given back.
func (b *budget) spent(now func() time.Time) bool {
	return b.left.Load() < 0 && b.refill(now()) < 0
}

// refill gives back PerSecond for each whole second since it last did, up
// to Burst, and returns what is left.
func (b *budget) refill(now time.Time) int64 {
	back := int64(now.Sub(b.last) / (time.Second / PerSecond))
	if back <= 0 {
		return b.left.Load()
	}
	b.last = b.last.Add(time.Duration(back) * (time.Second / PerSecond))
	for {
		left := b.left.Load()
		n := min(left+back, max(left, Burst))
		if b.left.CompareAndSwap(left, n) {
			return n
		}
	}
}

// Conn is an HTTP/2 connection whose client's frames that are not requests
// are counted against a budget: Burst at first, PerSecond more each second
// up to Burst, PerStream for each stream the client opens and PerData for
// each DATA frame the server sends that leaves its stream open. A frame
// past the budget makes Read fail with ErrCalm, after a GOAWAY with
// ENHANCE_YOUR_CALM is written between two of the server's frames, and
// every later write fail.
type Conn struct {
	net.Conn
	b    *budget
	cuts *Cuts

	// spentBy is what each kind of the client's frames spent of the
	// budget when they were read; the reader's alone.
	spentBy [NumKinds]int64
	// refused is what the server's refusals spent; wmu guards it.
	refused int64
	// early is how many DATA frames on streams the client ended were
	// charged when read, whose refusal (STREAM_CLOSED) is still to be
	// written and then costs nothing more; the writer takes from it.
	early atomic.Int64

	// byHandler says that a stream earns when its request reaches the
	// server's handler (Handled), not when it is opened: set by
	// NewHandled.
	byHandler bool
	handled   atomic.Int64 // the requests the handler was handed
	opened    int64        // the streams the client opened; the reader's alone

	// The reader's alone.
	in       scanner
	preface  int    // bytes of the preface still to read and drop
	pass     int    // bytes of the preface still to pass unscanned
	streams  uint32 // the highest stream the client opened
	calm     bool   // the budget is spent
	inFrames func(header)
	// open holds the streams the client opened and has not ended (with
	// END_STREAM or RST_STREAM), up to maxOpen: a DATA frame on any
	// other it opened above forgot is refused for sure, and is charged
	// when read, not when the server refuses it, which a server whose
	// writes lag its reads may never do before it closes the connection
	// itself. forgot is the highest stream open held when it was full and
	// emptied: whether the client ended those up to it is not known.
	open   map[uint32]struct{}
	forgot uint32

	// wmu guards the order of the bytes written: a write, the scanner of
	// the frames written (which the GOAWAY must not cut) and what they
	// tell, and the write deadline, which the GOAWAY sets.
	wmu       sync.Mutex
	out       scanner
	pending   bool // the GOAWAY waits for the server's frame written to end
	late      int  // DATA frames on streams answered early that may still come
	shut      bool // the GOAWAY was written: nothing more is
	outFrames func(header)
}

// Preface says where a connection handed to New stands in its client's
// preface.
type Preface int

const (
	// PrefaceRead is a connection whose preface was read.
	PrefaceRead Preface = iota
	// PrefaceDropped is a connection whose preface is still to come, and
	// is read and dropped by the Conn, for a server that takes
	// connections whose preface was read.
	PrefaceDropped
	// PrefacePassed is a connection whose preface is still to come, and
	// is passed to the server, which reads it.
	PrefacePassed
)

// New returns c as a Conn, whose cut, if its client spends its budget, is
// counted and logged by cuts (nil: neither).
func New(c net.Conn, p Preface, cuts *Cuts) *Conn {
	g := &Conn{Conn: c, b: newBudget(time.Now()), cuts: cuts, open: make(map[uint32]struct{})}
	switch p {
	case PrefaceDropped:
		g.preface = len(preface)
	case PrefacePassed:
		g.pass = len(preface)
	}
	g.inFrames = g.clientFrame
	g.outFrames = g.serverFrame
	return g
}

// NewHandled returns c as a Conn as New does, but whose streams earn
// their budget only when Handled tells that their call reached the
// server's handler, not when they are opened: the HEADERS frame that
// opens a stream spends the budget, and Handled gives it back with
// PerStream. A server that answers a stream itself (a method it does not
// know, headers it refuses) cannot then be made to do so without end.
func NewHandled(c net.Conn, p Preface, cuts *Cuts) *Conn {
	g := New(c, p, cuts)
	g.byHandler = true
	return g
}

// Handled tells a Conn of NewHandled's (or of Install's) that the request
// of one of its streams reached the server's handler: it gives back what
// the HEADERS frame that opened the stream spent, and PerStream. It is
// safe for concurrent use, and does nothing on a Conn of New's, whose
// streams earned when they were opened.
func (c *Conn) Handled() {
	if !c.byHandler {
		return
	}
	c.handled.Add(1)
	c.b.earn(PerStream + 1)
}

// maxOpen is how many streams a Conn holds as opened and not ended by the
// client: more than a server takes at once.
const maxOpen = 1024

// clientFrame counts a frame the client sent. A DATA frame that carries
// data or ends its stream spends nothing, but on a stream the client
// ended, and tells whether what the server refused spent the budget, as
// a HEADERS frame that opens a stream does.
func (c *Conn) clientFrame(h header) {
	if c.calm {
		return
	}
	switch {
	case h.typ == frameData && (h.data > 0 || h.flags&flagEndStream != 0):
		if c.ended(h.stream) {
			// The server refuses it (STREAM_CLOSED), or lets it pass
			// while its refusal of an earlier one waits.
			c.spentBy[KindRefusedStream]++
			c.early.Add(1)
			c.calm = !c.b.spend(time.Now)
			break
		}
		if h.flags&flagEndStream != 0 {
			delete(c.open, h.stream)
		}
		c.calm = c.b.spent(time.Now)
	case h.typ == frameHeaders && h.stream%2 == 1 && h.stream > c.streams:
		c.streams = h.stream
		c.opened++
		if h.flags&flagEndStream == 0 {
			if len(c.open) == maxOpen {
				c.forgot = h.stream - 2
				clear(c.open)
			}
			c.open[h.stream] = struct{}{}
		}
		if c.byHandler {
			// Spent now, given back with PerStream by the handler.
			c.calm = !c.b.spend(time.Now)
			break
		}
		c.b.earn(PerStream)
		c.calm = c.b.spent(time.Now)
	default:
		if h.typ == frameRSTStream || h.typ == frameHeaders && h.flags&flagEndStream != 0 {
			delete(c.open, h.stream)
		}
		c.spentBy[kindOf(h)]++
		c.calm = !c.b.spend(time.Now)
	}
}

// ended reports whether the client ended stream id, which it opened: a
// DATA frame on it is refused.
func (c *Conn) ended(id uint32) bool {
	if id%2 == 0 || id > c.streams || id <= c.forgot {
		return false
	}
	_, open := c.open[id]
	return !open
}

// serverFrame counts a frame the server sent: DATA that leaves its stream
// open, and a SETTINGS or PING the client is to acknowledge, earn what
// their answers spend. A RST_STREAM that refuses a stream
// (REFUSED_STREAM, past those the server takes at once, or
// PROTOCOL_ERROR) or ends it for the client's breaking its flow control or
// frame size costs what the stream's opening earned and a frame more: no
// handler and no limit ever see it. One for a DATA
// frame on a stream closed (STREAM_CLOSED) costs a frame, but for one
// charged when read, on a stream the client ended, and for the
// frames a client may have sent before it learnt its stream was answered
// (NO_ERROR: before its body was read), a window of 1 MiB in frames of
// 16 KiB each. On a connection of NewHandled's or Install's, a stream
// earns only when its request reaches the handler, so one refused costs
// the frame that opened it, and its RST_STREAM nothing more.
func (c *Conn) serverFrame(h header) {
	switch {
	case h.typ == frameData && h.length > 0 && h.flags&flagEndStream == 0:
		c.b.earn(PerData)
	case (h.typ == frameSettings || h.typ == framePing) && h.flags&flagAck == 0:
		c.b.earn(1)
	case h.typ != frameRSTStream:
	case h.code == codeNoError:
		c.late += lateFrames
	case h.code == codeStreamClosed && c.early.Load() > 0:
		c.early.Add(-1)
	case h.code == codeStreamClosed && c.late > 0:
		c.late--
	case h.code == codeStreamClosed:
		c.refused++
		c.b.earn(-1)
	case c.byHandler:
	case h.code == codeProtocol || h.code == codeFlowControl || h.code == codeFrameSize || h.code == codeRefusedStream:
		c.refused += PerStream + 1
		c.b.earn(-(PerStream + 1))
	}
}

// lateFrames is how many DATA frames of a stream answered before its body
// was read may come after it closed: 1 MiB in frames of 16 KiB.
const lateFrames = 64

// Read reads the client's bytes, as net.Conn's Read does, until its
// budget is spent.
func (c *Conn) Read(p []byte) (int, error) {
	if c.calm {
		return 0, ErrCalm
	}
	for c.preface > 0 {
		var buf [len(preface)]byte
		got := buf[:c.preface]
		n, err := c.Conn.Read(got)
		if string(got[:n]) != preface[len(preface)-c.preface:][:n] {
			return 0, errPreface
		}
		c.preface -= n
		if err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Read(p)
	skip := min(n, c.pass)
	c.pass -= skip
	c.in.feed(p[skip:n], c.inFrames)
	if c.calm {
		// A server's write the client does not read holds wmu, which the
		// GOAWAY waits for: past a second the connection is closed under
		// it, so that the write gives way and the cut is made. (Not a
		// write deadline set from here: the connection under a Conn may
		// take its deadlines from one goroutine at a time, as the
		// edge engine's does, and wmu keeps them so.)
		t := time.AfterFunc(time.Second, func() { _ = c.Conn.Close() })
		k := c.goAway()
		t.Stop()
		c.cuts.cut(c.Conn.RemoteAddr(), k)
	}
	return n, err
}

// goAway writes a GOAWAY with ENHANCE_YOUR_CALM once the server's frames
// written stand whole, then lets the server write nothing more. The GOAWAY
// is the server's last word only if its client takes it before the
// connection's close: a client that keeps sending may see its connection
// reset first. It returns the kind of frame that spent most of the
// budget.
func (c *Conn) goAway() Kind {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	spent := c.spentBy
	spent[KindRefusedStream] += c.refused
	if c.byHandler {
		// The streams whose request the handler was not handed.
		spent[KindRefusedStream] += max(c.opened-c.handled.Load(), 0)
	}
	most := KindOther
	for k := range NumKinds {
		if spent[k] > spent[most] {
			most = k
		}
	}
	if c.shut {
		return most
	}
	if !c.out.between() {
		// The server's next write that ends a frame writes it.
		c.pending = true
		return most
	}
	c.writeGoAway()
	return most
}

// writeGoAway writes the GOAWAY and shuts the server's writes; wmu is held.
func (c *Conn) writeGoAway() {
	c.shut = true
	const debug = "too many frames that are not requests"
	f := make([]byte, frameHeaderLength+8+len(debug))
	f[2] = byte(8 + len(debug))
	f[3] = frameGoAway
	binary.BigEndian.PutUint32(f[9:], c.streams)
	binary.BigEndian.PutUint32(f[13:], codeEnhanceCalm)
	copy(f[17:], debug)
	_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Conn.Write(f)
}

// Write writes the server's bytes, as net.Conn's Write does, until the
// client's budget is spent.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.shut {
		return 0, ErrCalm
	}
	n, err := c.Conn.Write(p)
	c.out.feed(p[:n], c.outFrames)
	if c.pending && c.out.between() {
		c.writeGoAway()
	}
	return n, err
}

// SetWriteDeadline sets the connection's write deadline, as net.Conn's
// does, in turn with the GOAWAY's own.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the connection's deadlines, as net.Conn's does, in
// turn with the GOAWAY's own.
func (c *Conn) SetDeadline(t time.Time) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.SetDeadline(t)
}

// earner is a connection's handler: each request it is handed gives back
// its Conn's budget what the HEADERS frame that opened the stream spent
// and PerStream. net/http answers a request whose headers pass the
// server's bound (431), or that holds a header HTTP/2 forbids (400),
// without it: no limit sees such a request, and it earns nothing.
type earner struct {
	h http.Handler
	c *Conn
}

func (h earner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.c.Handled()
	h.h.ServeHTTP(w, r)
}

// BaseContext returns the connection's base context, which net/http's
// HTTP/2 server reads from the handler it is given.
func (h earner) BaseContext() context.Context {
	if bc, ok := h.h.(interface{ BaseContext() context.Context }); ok {
		return bc.BaseContext()
	}
	return context.Background()
}

// guarded returns c as a Conn of Install's, and h as the handler of its
// requests.
func guarded(c net.Conn, p Preface, cuts *Cuts, h http.Handler) (*Conn, http.Handler) {
	g := NewHandled(c, p, cuts)
	return g, earner{h: h, c: g}
}

// tlsConn is a Conn over TLS, which tells its TLS state as *tls.Conn does.
type tlsConn struct {
	*Conn
	tc *tls.Conn
}

// ConnectionState returns the TLS connection's state.
func (c tlsConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// NetConn returns the TLS connection, as net/http's server accepted it:
// whoever holds what net/http's HTTP/2 server serves (the *tls.Conn made
// around a handoff, which its ConnState is told of) finds it through
// NetConn, UnencryptedNetConn and NetConn again.
func (c tlsConn) NetConn() net.Conn { return c.tc }

// unencrypted is the key of net/http's Server.TLSNextProto under which its
// HTTP/2 server takes connections without TLS whose preface was read: a
// *tls.Conn that never shook hands, around a net.Conn whose
// UnencryptedNetConn method gives the connection itself.
const unencrypted = "unencrypted_http2"

// handoff is the net.Conn inside such a *tls.Conn.
type handoff struct {
	net.Conn // nil: never used
	conn     net.Conn
}

// UnencryptedNetConn returns the connection handed over.
func (h handoff) UnencryptedNetConn() net.Conn { return h.conn }

// errNotYet is what the listener that makes net/http set up HTTP/2 says.
var errNotYet = errors.New("h2guard: setting up")

// notYet is a listener that accepts nothing.
type notYet struct{}

func (notYet) Accept() (net.Conn, error) { return nil, errNotYet }
func (notYet) Close() error              { return nil }
func (notYet) Addr() net.Addr            { return &net.TCPAddr{} }

// Install makes each HTTP/2 connection srv serves, over TLS (h2) or
// without (h2c), a Conn, served by net/http's own HTTP/2 server. It must
// be called once srv's Protocols, TLSConfig and HTTP2 are set and before
// srv serves; it does nothing when srv serves no HTTP/2. The connections
// cut are counted and logged by cuts (nil: neither). A stream earns its
// connection's budget once its request reaches srv's handler, so that the
// requests net/http answers itself (431, 400), unseen by any handler or
// limit, cannot be sent without end.
func Install(srv *http.Server, cuts *Cuts) error {
	// net/http sets up its HTTP/2 server in TLSNextProto when it first
	// serves: a listener that accepts nothing makes it do so now.
	if err := srv.Serve(notYet{}); !errors.Is(err, errNotYet) {
		return fmt.Errorf("h2guard: set up HTTP/2: %w", err)
	}
	h2c := srv.TLSNextProto[unencrypted]
	if h2c == nil {
		if len(srv.TLSNextProto) > 0 {
			return errors.New("h2guard: net/http takes no HTTP/2 connection without TLS: its HTTP/2 connections cannot be guarded")
		}
		return nil
	}
	srv.TLSNextProto[unencrypted] = func(hs *http.Server, tc *tls.Conn, h http.Handler) {
		u, ok := tc.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			h2c(hs, tc, h) // which refuses it
			return
		}
		g, gh := guarded(u.UnencryptedNetConn(), PrefaceRead, cuts, h)
		h2c(hs, tls.Client(handoff{conn: g}, nil), gh)
	}
	if _, ok := srv.TLSNextProto["h2"]; ok {
		// The h2c entry takes it too, its preface dropped by the Conn,
		// and reads its TLS state from the Conn.
		srv.TLSNextProto["h2"] = func(hs *http.Server, tc *tls.Conn, h http.Handler) {
			g, gh := guarded(tc, PrefaceDropped, cuts, h)
			h2c(hs, tls.Client(handoff{conn: tlsConn{g, tc}}, nil), gh)
		}
	}
	return nil
}
