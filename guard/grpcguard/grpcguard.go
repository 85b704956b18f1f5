package grpcguard

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/limiter"
)

// UnaryServerInterceptor returns the interceptor that takes every unary
// call through g: a call over a limit is refused before the handler runs.
func UnaryServerInterceptor(g *guard.Guard) grpc.UnaryServerInterceptor {
	gw := g.Gateway()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := call{gw: gw, ctx: ctx, method: info.FullMethod}
		c.from(ctx)
		var resp any
		c.run = func(rec *gateway.Recorder) error {
			defer c.watchEnd(rec)()
			hctx := ctx
			var seen *seenMetadata
			if rec != nil {
				// The answer may tell a cost in the metadata the handler
				// sets: look at it as it goes by.
				if sts := grpc.ServerTransportStreamFromContext(ctx); sts != nil {
					seen = &seenMetadata{}
					hctx = grpc.NewContextWithServerTransportStream(ctx, &seenTransportStream{ServerTransportStream: sts, seen: seen})
				}
			}
			var err error
			resp, err = handler(hctx, req)
			c.answered(rec, err, seen)
			// The call's message was read before the handler ran: its
			// whole run is the service's.
			c.answerBegins(c.status)
			return err
		}
		c.decide()
		if len(c.trailer) > 0 {
			_ = grpc.SetTrailer(ctx, c.trailer)
		}
		if c.refusal != nil {
			return nil, c.refusal
		}
		return resp, c.err
	}
}

// StreamServerInterceptor returns the interceptor that takes every
// streaming call through g: once when the stream opens, or once for each
// message the client sends on a route whose grpc_stream is per_message.
func StreamServerInterceptor(g *guard.Guard) grpc.StreamServerInterceptor {
	gw := g.Gateway()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		c := call{gw: gw, ctx: ctx, method: info.FullMethod}
		c.from(ctx)
		if rt := g.Policy().Route(http.MethodPost, c.host, c.method); rt != nil && rt.StreamPerMessage {
			ms := &messageStream{ServerStream: ss, base: c}
			err := handler(srv, ms)
			if len(ms.trailer) > 0 {
				ss.SetTrailer(ms.trailer)
			}
			return err
		}
		c.run = func(rec *gateway.Recorder) error {
			defer c.watchEnd(rec)()
			stream := ss
			if c.f.Match().Overload != nil {
				stream = &pacedStream{ServerStream: ss, c: &c}
			}
			var seen *seenMetadata
			if rec != nil {
				// The cost may be told through the stream or through its
				// context (grpc.SetHeader, grpc.SetTrailer): both are seen.
				seen = &seenMetadata{}
				s := &seenStream{ServerStream: stream, seen: seen}
				if sts := grpc.ServerTransportStreamFromContext(ctx); sts != nil {
					s.ctx = grpc.NewContextWithServerTransportStream(ctx, &seenTransportStream{ServerTransportStream: sts, seen: seen})
				}
				stream = s
			}
			err := handler(srv, stream)
			c.answered(rec, err, seen)
			c.answerBegins(c.status) // nothing sent before: the code is the answer
			return err
		}
		c.decide()
		if len(c.trailer) > 0 {
			ss.SetTrailer(c.trailer)
		}
		if c.refusal != nil {
			return c.refusal
		}
		return c.err
	}
}

// messageStream is a stream whose messages from the client are each
// decided as they are received (grpc_stream: per_message).
type messageStream struct {
	grpc.ServerStream
	base    call        // the stream's request, copied for each message
	trailer metadata.MD // the fields of the last decision
}

func (s *messageStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	c := s.base
	c.run = func(rec *gateway.Recorder) error {
		if rec != nil {
			// The message's part of the call is over once it is taken.
			rec.Header(http.StatusOK, noMetadata{})
			rec.SetComplete()
		}
		return nil
	}
	c.decide()
	if c.trailer != nil {
		s.trailer = c.trailer
	}
	return c.refusal // nil: the message is given to the handler
}

// call is one call (or one message of a per_message stream) as the
// admission flow sees it: a gateway.Exchange.
type call struct {
	gw     *gateway.Gateway
	ctx    context.Context
	method string // the full method name, /package.Service/Method
	host   string // the :authority
	md     metadata.MD
	peer   netip.Addr
	// run calls the handler once the flow passes the call; rec, when not
	// nil, is to be told how it answered.
	run func(rec *gateway.Recorder) error

	f       *gateway.Flow
	trailer metadata.MD // the fields to send
	refusal error       // the flow's own answer, as a status error
	status  int         // its HTTP status, or the handler's answer's
	err     error       // the handler's error
	ran     bool        // the handler ran

	// The time the call had left when the Guard took it (0 without a
	// deadline), and when its context ended, noted while the handler
	// runs (watchEnd; Unix nanoseconds, atomic, 0 not yet): byDeadline.
	timeout time.Duration
	ended   int64

	// For the route's overload control: the answer began (its header
	// went out, or the handler returned: 1, atomic), and how long before
	// that the handler waited on the client's messages (ns, atomic).
	began  int32
	waited int64
}

// overrideFields are the gateway's method override fields, in metadata's
// lower case.
var overrideFields = func() []string {
	names := gateway.MethodOverrideFields()
	for i, n := range names {
		names[i] = strings.ToLower(n)
	}
	return names
}()

// from reads the call's authority, metadata, peer and deadline from its
// context.
func (c *call) from(ctx context.Context) {
	if dl, ok := ctx.Deadline(); ok {
		c.timeout = time.Until(dl)
	}
	c.md, _ = metadata.FromIncomingContext(ctx) // a copy: the handler's stays as sent
	if v := c.md.Get(":authority"); len(v) > 0 {
		c.host = v[0]
	}
	// A call is a POST whatever its metadata says, and its handler serves
	// it as one: a method override field names POST to the flow, so that
	// under method_override: honor a call never meets the limits of
	// another method (reject still refuses it, strip removes it).
	for _, name := range overrideFields {
		for i, v := range c.md[name] {
			if strings.TrimSpace(v) != "" {
				c.md[name][i] = http.MethodPost
			}
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if a, ok := p.Addr.(*net.TCPAddr); ok {
			c.peer, _ = netip.AddrFromSlice(a.IP)
			c.peer = c.peer.Unmap()
		} else {
			c.peer, _ = netip.ParseAddr(hostOf(p.Addr.String()))
		}
	}
}

// hostOf returns the host of host:port (s itself without a port).
func hostOf(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// decide takes the call through the admission flow; the handler runs
// within, when the flow passes the call.
func (c *call) decide() {
	f := c.gw.Begin()
	c.f = f
	v := f.Request()
	v.Method = http.MethodPost
	v.Host = c.host
	v.Path = c.method
	v.Proto = "HTTP/2.0"
	v.Peer = c.peer
	v.Header = header(c.md)
	if dl, ok := c.ctx.Deadline(); ok {
		// Past its deadline the call's answer reaches no one, as an HTTP
		// answer past its server's write timeout: a place in a leaky
		// queue that would come later is refused at once.
		v.WriteDeadline = dl
	}
	defer func() {
		c.gw.Finish(c, f)
		c.f = nil
	}()
	// Nothing a gRPC call does goes on after the handler returns.
	c.gw.Run(c, f)
	if c.refusal == nil && !c.ran {
		c.unanswered()
	}
}

// answered notes how the handler answered, for the recorder of a
// reservation. A handler that ended with its context's own error once its
// client left (cancelled, or past its deadline) gave no answer of its
// own: the recorder is told so (gateway.Recorder.ClientLeft), so that a
// limit counted by outcome counts that code and the work it did keeps its
// charge on a limit charged by actual cost (the cost it told, else the
// estimate), as for a handler behind the middleware that writes nothing
// once its client left.
func (c *call) answered(rec *gateway.Recorder, err error, seen *seenMetadata) {
	code := codeOf(err)
	c.status = HTTPStatus(c.byDeadline(code))
	if rec == nil {
		return
	}
	var h gateway.Getter = noMetadata{}
	if seen != nil {
		h = seen
	}
	if left := c.ctx.Err(); left != nil && code == status.FromContextError(left).Code() {
		rec.ClientLeft()
	}
	rec.Header(c.status, h)
	rec.SetComplete()
}

// answerBegins tells the route's overload control, once, that the
// call's answer begins with st (the HTTP status its code stands for, OK
// for a header or message sent before the end): the call's status line,
// where the adaptive limit's latency ends. The time the handler waited
// before on the client's messages is the client's pace, not the service's
// load: it is left out, as a slow upload's is. A client gone by then
// leaves the status untold: its call teaches nothing.
func (c *call) answerBegins(st int) {
	if c.f == nil || !atomic.CompareAndSwapInt32(&c.began, 0, 1) || c.ctx.Err() != nil {
		return
	}
	c.f.UpstreamBodyWaited(time.Duration(atomic.LoadInt64(&c.waited)))
	c.f.UpstreamStatus(st)
}

// pacedStream is the stream of a call under overload control: it notes
// when the answer begins (the first header or message sent) and how long
// the handler waited on the client's messages before it.
type pacedStream struct {
	grpc.ServerStream
	c *call
}

func (s *pacedStream) RecvMsg(m any) error {
	if atomic.LoadInt32(&s.c.began) != 0 {
		return s.ServerStream.RecvMsg(m)
	}
	t := time.Now()
	err := s.ServerStream.RecvMsg(m)
	atomic.AddInt64(&s.c.waited, int64(time.Since(t)))
	return err
}

func (s *pacedStream) SendHeader(md metadata.MD) error {
	s.c.answerBegins(http.StatusOK)
	return s.ServerStream.SendHeader(md)
}

func (s *pacedStream) SendMsg(m any) error {
	s.c.answerBegins(http.StatusOK)
	return s.ServerStream.SendMsg(m)
}

func (c *call) Context() context.Context { return c.ctx }

// DelHeader removes a field from the call's view of its metadata (the
// method override fields); the handler's metadata is left as it is.
func (c *call) DelHeader(name string) { delete(c.md, strings.ToLower(name)) }

func (c *call) SetHeader(name, value string) {
	if c.md == nil {
		c.md = metadata.MD{}
	}
	c.md[strings.ToLower(name)] = []string{value}
}

// RequestBody returns nil: an estimate takes its default.
func (c *call) RequestBody(int) []byte { return nil }

func (c *call) SetFields(fs []fields.Field) {
	md := make(metadata.MD, len(fs))
	for _, f := range fs {
		name := strings.ToLower(f.Name)
		md[name] = append(md[name], f.Value)
	}
	c.trailer = md
}

func (c *call) Answer(st int, body []byte, challenge bool) {
	c.status = st
	msg := message(st, body)
	var s *status.Status
	switch st {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		code := codes.ResourceExhausted
		if st == http.StatusServiceUnavailable {
			// Shed by the route's overload control, or a refusal the
			// policy answers 503.
			code = codes.Unavailable
		}
		s = status.New(code, msg)
		if d, ok := c.retryAfter(); ok {
			if ds, err := s.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
				s = ds
			}
		}
	case http.StatusForbidden:
		s = status.New(codes.PermissionDenied, msg)
	case http.StatusUnauthorized:
		s = status.New(codes.Unauthenticated, msg)
	case http.StatusBadRequest:
		s = status.New(codes.InvalidArgument, msg)
	case http.StatusInternalServerError:
		s = status.New(codes.Internal, msg)
	default:
		s = status.New(codes.Unknown, msg)
	}
	if challenge {
		if c.trailer == nil {
			c.trailer = metadata.MD{}
		}
		c.trailer.Set("www-authenticate", gateway.BearerChallenge)
	}
	c.refusal = s.Err()
}

// retryAfter returns when the refused call would pass: the engine's wait,
// else the Retry-After field's seconds; false when the refusal has no
// wait (a cost that can never fit).
func (c *call) retryAfter() (time.Duration, bool) {
	v := c.trailer.Get("retry-after")
	if len(v) == 0 {
		return 0, false
	}
	if d := c.f.Result().RetryAfter; d > 0 {
		return d, true
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// message returns the message of one of the flow's JSON bodies, and its
// reason when it tells one; a body of another form (a limit's refusal
// with a body of its own) gives the text of its status, st.
func message(st int, body []byte) string {
	var b struct {
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	if json.Unmarshal(body, &b) != nil || b.Message == "" {
		if text := http.StatusText(st); text != "" {
			return text
		}
		return http.StatusText(http.StatusInternalServerError)
	}
	if b.Reason != "" {
		return b.Message + ": " + b.Reason
	}
	return b.Message
}

// Pass runs the handler, unless the client has gone and nothing is
// reserved: no one waits for the answer then, and the engine may not
// have charged the call (a store call that gave up with its client ends
// in an error, on which the flow passes the call as it passes one whose
// store failed). A call with a reservation runs, its client gone or not,
// as floodgate serve forwards such a request: its answer decides the
// charge.
func (c *call) Pass(_ *gateway.Flow, rec *gateway.Recorder) bool {
	if c.ctx.Err() != nil && rec == nil {
		return false // unanswered
	}
	c.ran = true
	c.err = c.run(rec)
	return false
}

// unanswered ends a call that the flow neither answered nor passed to its
// handler, its client gone: CANCELLED (or DEADLINE_EXCEEDED), as gRPC
// ends a call its client cancelled.
func (c *call) unanswered() {
	err := c.ctx.Err()
	if err == nil {
		err = context.Canceled // not seen: the flow gives up on a call only once its client left
	}
	c.refusal = status.FromContextError(err).Err()
	c.status = HTTPStatus(c.byDeadline(codeOf(c.refusal)))
}

// deadlineSlack is how long before a call's deadline a cancellation from
// its client is taken for the deadline's (byDeadline), at most.
const deadlineSlack = 100 * time.Millisecond

// watchEnd notes, while the handler runs, when the call's context ends,
// for byDeadline; it returns the function that stops watching. Only a
// call whose charge waits for its answer (rec: a limit counting by
// outcome or by actual cost) and that has a deadline is watched; for the
// others (their code is for the metrics and the logs) byDeadline takes
// the handler's return for the moment.
func (c *call) watchEnd(rec *gateway.Recorder) (stop func() bool) {
	if _, ok := c.ctx.Deadline(); !ok || rec == nil {
		return func() bool { return false }
	}
	return context.AfterFunc(c.ctx, func() { atomic.StoreInt64(&c.ended, time.Now().UnixNano()) })
}

// byDeadline returns DEADLINE_EXCEEDED for a call cancelled by its
// client's deadline, else code. A client whose deadline passes cancels
// its call (RST_STREAM), and that usually reaches the server before the
// server's own timer for the same deadline (the grpc-timeout the client
// sent) fires, so the call's context ends CANCELLED: counted as it is, a
// count_on [504] limit would almost never see a call time out. The
// server's deadline runs from when it read the call's headers, so on a
// loaded server it falls after the client's by as long as that read
// waited: a cancellation that comes within deadlineSlack of the deadline
// (a quarter of the time the call had, when that is shorter) is taken
// for the deadline's; one earlier stays CANCELLED (499).
func (c *call) byDeadline(code codes.Code) codes.Code {
	if code != codes.Canceled || !errors.Is(c.ctx.Err(), context.Canceled) {
		return code
	}
	dl, ok := c.ctx.Deadline()
	if !ok {
		return code
	}
	at := time.Now() // the handler returned as its context ended, before the watch noted it
	if n := atomic.LoadInt64(&c.ended); n != 0 {
		at = time.Unix(0, n)
	}
	slack := min(deadlineSlack, max(c.timeout, 0)/4)
	if at.Before(dl.Add(-slack)) {
		return code
	}
	return codes.DeadlineExceeded
}

func (c *call) Proxies() bool { return false }

func (c *call) Wait(ctx context.Context, f *gateway.Flow, delay time.Duration) bool {
	return c.gw.WaitInQueue(ctx, f, delay, func() (<-chan struct{}, func()) { return c.ctx.Done(), func() {} })
}

func (c *call) Keep(ctx context.Context, leases []limiter.Hit) func() { return c.gw.Renew(ctx, leases) }

func (c *call) Answered() (int, int64) { return c.status, 0 }

// header is incoming metadata read as header fields: names in any case.
type header metadata.MD

func (h header) Get(name string) string {
	if v := metadata.MD(h).Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h header) Values(name string) []string { return metadata.MD(h).Get(name) }

// noMetadata is an answer without metadata.
type noMetadata struct{}

func (noMetadata) Get(string) string { return "" }

// seenMetadata is the header and trailer metadata a handler set, read as
// the header fields of its answer.
type seenMetadata struct {
	header, trailer metadata.MD
}

// Get returns the last value the handler set for name: the trailer's
// before the header's, each the last one set. A handler may tell its cost
// as its work goes (each grpc.SetTrailer adds its values to those set
// before, as the client receives them), so that a call ended early still
// tells what it did: its last word is its cost, not its first.
func (s *seenMetadata) Get(name string) string {
	if v := s.trailer.Get(name); len(v) > 0 {
		return v[len(v)-1]
	}
	if v := s.header.Get(name); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// seenTransportStream notes the metadata a unary handler sets.
type seenTransportStream struct {
	grpc.ServerTransportStream
	seen *seenMetadata
}

func (s *seenTransportStream) SetHeader(md metadata.MD) error {
	s.seen.header = metadata.Join(s.seen.header, md)
	return s.ServerTransportStream.SetHeader(md)
}

func (s *seenTransportStream) SendHeader(md metadata.MD) error {
	s.seen.header = metadata.Join(s.seen.header, md)
	return s.ServerTransportStream.SendHeader(md)
}

func (s *seenTransportStream) SetTrailer(md metadata.MD) error {
	s.seen.trailer = metadata.Join(s.seen.trailer, md)
	return s.ServerTransportStream.SetTrailer(md)
}

// seenStream notes the metadata a streaming handler sets, on the stream
// or through its context.
type seenStream struct {
	grpc.ServerStream
	seen *seenMetadata
	ctx  context.Context // the stream's context noting what is set through it (nil: the stream's own)
}

func (s *seenStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.ServerStream.Context()
}

func (s *seenStream) SetHeader(md metadata.MD) error {
	s.seen.header = metadata.Join(s.seen.header, md)
	return s.ServerStream.SetHeader(md)
}

func (s *seenStream) SendHeader(md metadata.MD) error {
	s.seen.header = metadata.Join(s.seen.header, md)
	return s.ServerStream.SendHeader(md)
}

func (s *seenStream) SetTrailer(md metadata.MD) {
	s.seen.trailer = metadata.Join(s.seen.trailer, md)
	s.ServerStream.SetTrailer(md)
}

// codeOf returns the code grpc-go sends for a handler's error: a status
// error's own code (wrapped or not), and for any other error the code of
// the context error it wraps (CANCELLED, DEADLINE_EXCEEDED), else UNKNOWN.
func codeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return status.FromContextError(err).Code()
}

// HTTPStatus returns the HTTP status a gRPC code stands for, as
// google.rpc.Code documents it: what a limit's count_on compares with.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // Client Closed Request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // Unknown, Internal, DataLoss
}
