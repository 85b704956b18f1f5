package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/floodgate/floodgate/internal/h2guard"
)

// ServiceName is the name the health service reports the RLS under.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// DefaultMaxConcurrentStreams, DefaultMaxHeaderListSize and
// DefaultMaxRequestSize bound what one connection can hold (gRPC's own
// defaults bound the first two not at all and the third at 4 MiB: a client
// could open millions of calls that never send their message, send
// megabytes of metadata with each, or have each call's message read into
// memory up to 4 MiB). Envoy's rate-limit calls are a few per connection
// at a time, each with a few hundred bytes of metadata and a message of
// a few hundred bytes; DefaultMaxRequestSize is the bound of a /json body.
// A call held by its client stalls for at most DefaultCallTimeout, so that
// a connection holds at most 256 calls' goroutines and messages, each for
// a bounded time.
const (
	DefaultMaxConcurrentStreams = 256
	DefaultMaxHeaderListSize    = 64 << 10
	DefaultMaxRequestSize       = maxJSONBody
)

// DefaultCallTimeout bounds a rate-limit call (ShouldRateLimit, or the
// health service's Check) from its start to its end when
// ServerOptions.CallTimeout is zero. Envoy gives its calls tens of
// milliseconds and a decision takes at most the store's deadlines; a call
// past it is one whose client never sent its whole request (gRPC waits
// for it for ever, holding a goroutine and what came of the message).
const DefaultCallTimeout = 10 * time.Second

// DefaultWindowSize is the flow-control window of a connection when

// ServerOptions.WindowSize is zero.
const DefaultWindowSize = 1 << 20

// DefaultHandshakeTimeout is how long a new connection may take to
// finish its TLS handshake and send its HTTP/2 preface when
// ServerOptions.HandshakeTimeout is zero: Envoy takes milliseconds; gRPC's
// own default, 120 s, lets a client that connects and sends nothing hold a
// place of the listener's cap, and hold up a stop, for two minutes.
const DefaultHandshakeTimeout = 10 * time.Second

// DefaultWriteTimeout is how long a write to a connection may wait for
// its client to take it when ServerOptions.WriteTimeout is zero: Envoy
// reads its answers at once; a client that sends calls and never reads
// their answers would otherwise hold its connection, with the answers and
// calls queued on it, until a keepalive ping goes unanswered (two hours
// by default), whatever CallTimeout says.
const DefaultWriteTimeout = 20 * time.Second

// DefaultMaxConnectionIdle is how long a connection may stay without a call
// in flight when ServerOptions.MaxConnectionIdle is zero: long enough
// that an Envoy whose routes are in use keeps its connection, short enough
// that connections opened and left unused (by a client gone away, or one
// holding places of the listener's cap) are given back within minutes.
const DefaultMaxConnectionIdle = 5 * time.Minute

// streamWindowSize is each call's flow-control window: HTTP/2's default,
// far more than a RateLimitRequest takes.
const streamWindowSize = 65535

// ServerOptions configure a gRPC server for the service. The zero value
// serves plaintext with the keepalive defaults below.
type ServerOptions struct {
	// TLSCertFile and TLSKeyFile, when both set, serve TLS with this
	// certificate and key (PEM files).
	TLSCertFile, TLSKeyFile string
	// Creds, when not nil, are the credentials connections are served
	// with, in place of TLSCertFile and TLSKeyFile (credentials.NewTLS of
	// a configuration that reloads its certificate, say). Unlike a
	// grpc.Creds among ExtraOptions, they keep each connection's HTTP/2
	// frames that are not calls held to the budget.
	Creds credentials.TransportCredentials
	// MaxConnectionAge closes connections after this long (with ±10%
	// jitter) so that clients re-resolve and spread over new instances;
	// 0 means never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace lets calls in flight finish after
	// MaxConnectionAge. Zero means 10s.
	MaxConnectionAgeGrace time.Duration
	// HandshakeTimeout closes a new connection that has not finished its
	// TLS handshake and sent its HTTP/2 preface within it. Zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxConnectionIdle closes a connection that has had no call in
	// flight for this long, gracefully (HTTP/2 GOAWAY: a client dials
	// again for its next call); a connection with a call in flight is
	// never closed for being idle. Zero means DefaultMaxConnectionIdle;
	// negative means never.
	MaxConnectionIdle time.Duration
	// KeepaliveTime is the idle time after which the server pings a
	// client. Zero means 2h (gRPC's default).
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long to wait for the ping's answer before
	// closing. Zero means 20s.
	KeepaliveTimeout time.Duration
	// MinPingInterval is the shortest interval between client pings the
	// server accepts; clients pinging faster are disconnected. Zero means
	// 10s (Envoy's gRPC clients ping no faster by default).
	MinPingInterval time.Duration
	// MaxConcurrentStreams bounds the calls in flight per connection;
	// 0 means DefaultMaxConcurrentStreams. A client at the bound waits for
	// a call to end before it starts another on that connection.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds the metadata of a call; 0 means
	// DefaultMaxHeaderListSize.
	MaxHeaderListSize uint32
	// MaxRequestSize bounds the message of a call in bytes: a call that
	// announces a longer one ends at once with RESOURCE_EXHAUSTED, before
	// it is read. Zero means DefaultMaxRequestSize.
	MaxRequestSize int
	// CallTimeout ends a ShouldRateLimit or health Check call that has
	// not ended this long after it started with DEADLINE_EXCEEDED, and
	// frees what it held (the client's own deadline, when shorter, ends it
	// first; the health service's Watch streams are not bounded). Zero
	// means DefaultCallTimeout; negative means no bound. The bound is set
	// with gRPC's tap handle, of which a server has one: ExtraOptions may
	// carry grpc.InTapHandle only with a negative CallTimeout.
	CallTimeout time.Duration
	// WriteTimeout closes a connection when a write to it (answers,
	// settings, pings) has waited this long for the client to take it: a
	// client that reads nothing holds its connection, and what is queued
	// on it, no longer. A client that reads is never cut, however long it
	// waits between calls. Zero means DefaultWriteTimeout; negative means
	// no bound.
	WriteTimeout time.Duration
	// StreamWorkers is the number of long-lived goroutines that run calls.
	// Reusing them saves starting (and growing the stack of) a goroutine per
	// call; when all are busy a call gets a goroutine of its own as usual.
	// Zero means 64; negative means none.
	StreamWorkers int
	// WindowSize is the flow-control window of each connection, fixed:
	// gRPC's dynamic windows (its bandwidth estimator) are off, so the
	// server sends no pings and window updates of its own while Envoy's
	// small calls stream in. Zero means 1 MiB (streams get gRPC's 64 KiB);
	// negative means gRPC's dynamic windows.
	WindowSize int32
	// GracePeriod is how long Serve waits for calls in flight when its
	// context ends before cutting them off. Zero means 10s.
	GracePeriod time.Duration
	// ExtraOptions are appended to the server options (interceptors,
	// stats handlers ...). A grpc.Creds among them replaces the server's
	// own, and with them the budget that holds each connection's HTTP/2
	// frames that are not calls (SETTINGS, WINDOW_UPDATEs...), past which
	// a client gets a GOAWAY with ENHANCE_YOUR_CALM: set Creds instead.
	ExtraOptions []grpc.ServerOption
	// Logger gets a warning, at most one a second (the next saying how
	// many were held back), for each connection cut for spending its
	// budget of frames that are not calls, naming the client's address
	// and the kind of frame that spent most of it. Nil logs none; the cuts
	// are counted either way (Server.ConnectionsCut).
	Logger *slog.Logger
}

// Server is a gRPC server carrying the RLS and the standard health
// service.
type Server struct {
	// GRPC is the underlying server, for registering more services.
	GRPC *grpc.Server
	// Health is the health service: SERVING while Serve runs, NOT_SERVING
	// once it starts to stop.
	Health *health.Server
	grace  time.Duration
	// stall bounds each write to a connection (0: no bound).
	stall time.Duration
	cuts  *h2guard.Cuts
	// conns finds a call's connection, to tell it the call was handled.
	conns *guardedConns
}

// ConnectionsCut returns how many connections were sent a GOAWAY with
// ENHANCE_YOUR_CALM and closed for spending their budget of frames that
// are not calls, by the kind of frame that spent most of it: "ping",
// "settings", "window_update", "priority", "rst_stream", "empty_data",
// "continuation", "unknown", "refused_stream" or "other".
func (s *Server) ConnectionsCut() map[string]int64 {
	m := make(map[string]int64, h2guard.NumKinds)
	for k := range h2guard.NumKinds {
		m[k.String()] = s.cuts.Count(k)
	}
	return m
}

// MinConnectionAge is the shortest ServerOptions.MaxConnectionAge but 0:
// gRPC draws a jitter of ±10% of the age at each connection, which needs
// an age of at least 10ns.
const MinConnectionAge = time.Millisecond

// NewServer returns a server with svc and the health service registered.
// A connection's HTTP/2 frames that are not calls are held to a budget,
// as the gateway's are: past it the client gets a GOAWAY with
// ENHANCE_YOUR_CALM and its connection is closed. A stream earns the
// budget once its call reaches a handler of the server's services (an
// interceptor of the server's tells it), so that the streams gRPC answers
// itself, or that the client resets at once, are held to it; a
// connection of a listener whose addresses are not net's TCP or Unix
// addresses earns when a stream opens.
func NewServer(svc *Service, opts ServerOptions) (*Server, error) {
	if opts.MaxConnectionAge < 0 || opts.MaxConnectionAge > 0 && opts.MaxConnectionAge < MinConnectionAge {
		return nil, fmt.Errorf("rls: MaxConnectionAge %v: want 0 (none) or at least %v", opts.MaxConnectionAge, MinConnectionAge)
	}
	// A client's HTTP/2 frames that are not calls (SETTINGS,
	// WINDOW_UPDATEs...) are held to a budget (internal/h2guard).
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	switch {
	case opts.Creds != nil && (opts.TLSCertFile != "" || opts.TLSKeyFile != ""):
		return nil, errors.New("rls: Creds and a TLS certificate file both set")
	case opts.Creds != nil:
		creds = opts.Creds
	case opts.TLSCertFile != "" || opts.TLSKeyFile != "":
		if opts.TLSCertFile == "" || opts.TLSKeyFile == "" {
			return nil, errors.New("rls: TLS needs both a certificate and a key file")
		}
		var err error
		if creds, err = credentials.NewServerTLSFromFile(opts.TLSCertFile, opts.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("rls: tls: %w", err)
		}
	}
	cuts, conns := &h2guard.Cuts{Log: opts.Logger}, &guardedConns{}
	so := []grpc.ServerOption{grpc.Creds(guardedCreds{creds, cuts, conns}),
		grpc.ChainUnaryInterceptor(conns.unary), grpc.ChainStreamInterceptor(conns.stream)}
	kp := keepalive.ServerParameters{
		MaxConnectionIdle:     opts.MaxConnectionIdle,
		MaxConnectionAge:      opts.MaxConnectionAge,
		MaxConnectionAgeGrace: opts.MaxConnectionAgeGrace,
		Time:                  opts.KeepaliveTime,
		Timeout:               opts.KeepaliveTimeout,
	}
	if kp.MaxConnectionAge > 0 && kp.MaxConnectionAgeGrace == 0 {
		kp.MaxConnectionAgeGrace = 10 * time.Second
	}
	if kp.Timeout == 0 {
		kp.Timeout = 20 * time.Second
	}
	switch {
	case kp.MaxConnectionIdle == 0:
		kp.MaxConnectionIdle = DefaultMaxConnectionIdle
	case kp.MaxConnectionIdle < 0:
		kp.MaxConnectionIdle = 0 // gRPC's infinity
	}
	minPing := opts.MinPingInterval
	if minPing <= 0 {
		minPing = 10 * time.Second
	}
	handshake := opts.HandshakeTimeout
	if handshake <= 0 {
		handshake = DefaultHandshakeTimeout
	}
	so = append(so,
		grpc.ConnectionTimeout(handshake),
		grpc.KeepaliveParams(kp),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPing, PermitWithoutStream: true}),
	)
	workers := opts.StreamWorkers
	if workers == 0 {
		workers = 64
	}
	if workers > 0 {
		so = append(so, grpc.NumStreamWorkers(uint32(workers)))
	}
	switch win := opts.WindowSize; {
	case win == 0:
		so = append(so, grpc.StaticConnWindowSize(DefaultWindowSize), grpc.StaticStreamWindowSize(streamWindowSize))
	case win > 0:
		so = append(so, grpc.StaticConnWindowSize(max(win, streamWindowSize)), grpc.StaticStreamWindowSize(streamWindowSize))
	}
	streams, header := opts.MaxConcurrentStreams, opts.MaxHeaderListSize
	if streams == 0 {
		streams = DefaultMaxConcurrentStreams
	}
	if header == 0 {
		header = DefaultMaxHeaderListSize
	}
	so = append(so, grpc.MaxConcurrentStreams(streams), grpc.MaxHeaderListSize(header))
	size := opts.MaxRequestSize
	if size <= 0 {
		size = DefaultMaxRequestSize
	}
	so = append(so, grpc.MaxRecvMsgSize(size))
	switch calls := opts.CallTimeout; {
	case calls == 0:
		so = append(so, grpc.InTapHandle(boundCalls(DefaultCallTimeout)))
	case calls > 0:
		so = append(so, grpc.InTapHandle(boundCalls(calls)))
	}
	so = append(so, opts.ExtraOptions...)
	g, err := newGRPCServer(so)
	if err != nil {
		return nil, err
	}
	svc.Register(g)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	grace := opts.GracePeriod
	if grace <= 0 {
		grace = 10 * time.Second
	}
	stall := opts.WriteTimeout
	switch {
	case stall == 0:
		stall = DefaultWriteTimeout
	case stall < 0:
		stall = 0
	}
	return &Server{GRPC: g, Health: hs, grace: grace, stall: stall, cuts: cuts, conns: conns}, nil
}

// Serve answers on lis until ctx ends, then reports NOT_SERVING, lets
// the calls in flight finish for up to the grace period and stops. It
// returns nil after a stop caused by ctx, or the error that ended serving.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.Health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	if s.stall > 0 {
		lis = &writeBoundListener{Listener: lis, d: s.stall}
	}
	errc := make(chan error, 1)
	go func() { errc <- s.GRPC.Serve(lis) }()
	select {
	case err := <-errc:
		s.Health.Shutdown()
		return fmt.Errorf("rls: serve: %w", err)
	case <-ctx.Done():
	}
	s.Health.Shutdown() // every service NOT_SERVING
	done := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.GRPC.Stop()
		<-done
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("rls: serve: %w", err)
	}
	return nil
}

// Register adds the rate-limit service to a gRPC server the caller owns
// (with its own health service, credentials and options); NewServer does
// this and more for a server of its own. Requests over
// Options.MaxDescriptors or Options.MaxEntries are refused before they are
// decoded.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	g.RegisterService(&serviceDesc, s)
}

// boundedCalls are the methods whose calls boundCalls bounds: the unary
// ones a client makes of the service. A health Watch is a stream that
// lasts as long as its client wants.
var boundedCalls = map[string]bool{
	rlsv3.RateLimitService_ShouldRateLimit_FullMethodName: true,
	healthpb.Health_Check_FullMethodName:                  true,
}

// boundCalls returns the tap handle that gives each call of boundedCalls
// a deadline d after its start.
func boundCalls(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if !boundedCalls[info.FullMethodName] {
			return ctx, nil
		}
		// The call's end cancels ctx, and with it the deadline's
		// context and its timer: its own cancel has nothing left to do.
		bounded, cancel := context.WithTimeout(ctx, d)
		_ = cancel
		return bounded, nil
	}
}

// newGRPCServer returns grpc.NewServer(so...), or an error where gRPC
// panics on options it cannot take together (a second tap handle).
func newGRPCServer(so []grpc.ServerOption) (g *grpc.Server, err error) {
	defer func() {
		if p := recover(); p != nil {
			g, err = nil, fmt.Errorf("rls: server options: %v", p)
		}
	}()
	return grpc.NewServer(so...), nil
}

// BoundWrites returns ln with the writes of each connection it accepts
// bounded as ServerOptions.WriteTimeout bounds the gRPC server's: a
// connection whose write has waited d for its client to take it is
// closed, and one whose client reads is never cut, however long its
// requests take or it waits between them. Zero means DefaultWriteTimeout;
// negative returns ln unchanged. It is for the service's HTTP listeners
// served by net/http (JSONHandler, Health, DebugHandler): net/http's own
// WriteTimeout bounds a request's handling as well as its answer, and
// without a bound a client that sends requests and never reads their
// answers holds its connection, a goroutine and the answers queued on it
// for as long as it stays connected.
func BoundWrites(ln net.Listener, d time.Duration) net.Listener {
	switch {
	case d < 0:
		return ln
	case d == 0:
		d = DefaultWriteTimeout
	}
	return &writeBoundListener{Listener: ln, d: d}
}

// writeBoundListener gives each connection it accepts a bound on its
// writes (writeBoundConn).
type writeBoundListener struct {
	net.Listener
	d time.Duration
}

// Accept returns the next connection, its writes bounded.
func (l *writeBoundListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeBoundConn{Conn: c, d: l.d, start: time.Now()}, nil
}

// writeBoundConn is a connection whose writes fail, and which closes,
// once a write has waited d for the client to take it. The write
// deadline is moved only when less than half of d is left, so that a
// connection busy with small writes does not move it at each.
type writeBoundConn struct {
	net.Conn
	d time.Duration
	// start is when the connection was accepted; until is when the
	// deadline set last passes, in nanoseconds since start (monotonic).
	start time.Time
	until atomic.Int64
}

// SetDeadline passes t on, and has the next write set the bound again:
// gRPC sets deadlines for a connection's handshake and clears them once
// its preface came, which clears the write bound with them.
func (c *writeBoundConn) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	c.until.Store(0)
	return err
}

// SetWriteDeadline passes t on, and has the next write set the bound
// again, as SetDeadline.
func (c *writeBoundConn) SetWriteDeadline(t time.Time) error {
	err := c.Conn.SetWriteDeadline(t)
	c.until.Store(0)
	return err
}

// Write writes b within the bound.
func (c *writeBoundConn) Write(b []byte) (int, error) {
	now := time.Now()
	at := int64(now.Sub(c.start))
	if c.until.Load()-at < int64(c.d/2) {
		if err := c.Conn.SetWriteDeadline(now.Add(c.d)); err != nil {
			return 0, err
		}
		c.until.Store(at + int64(c.d))
	}
	n, err := c.Conn.Write(b)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// gRPC leaves the connection to its reader when a write
		// fails, and the reader of a client that sends nothing more
		// waits for ever: close it here.
		_ = c.Conn.Close()
	}
	return n, err
}

// CloseWrite shuts the connection's writing side when the connection it
// bounds can: net/http does so before it closes a connection whose
// request it did not read whole, so that its answer is not lost to a
// reset.
func (c *writeBoundConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// guardedCreds makes each connection its credentials hand to gRPC an
// h2guard.Conn, whose client's frames that are not calls are held to a
// budget: grpc-go bounds PINGs (keepalive's too_many_pings), but answers
// every SETTINGS frame and takes every WINDOW_UPDATE, PRIORITY and frame
// of an unknown type for as long as the client reads. A stream earns the
// budget only once its call reaches a handler of the server's services
// (guardedConns.unary, .stream).
type guardedCreds struct {
	credentials.TransportCredentials
	cuts  *h2guard.Cuts
	conns *guardedConns
}

// ServerHandshake shakes hands as the credentials do.
func (g guardedCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := g.TransportCredentials.ServerHandshake(c)
	if err != nil {
		return nil, nil, err
	}
	return g.conns.guard(c, g.cuts), info, nil
}

// Clone returns a copy.
func (g guardedCreds) Clone() credentials.TransportCredentials {
	return guardedCreds{g.TransportCredentials.Clone(), g.cuts, g.conns}
}

// guardedConns are a server's h2guard.Conns whose streams earn their
// budget only once their call reaches a handler of the server's services,
// each found from its calls by the client's address gRPC gives them
// (peer.Addr): the value the Conn's RemoteAddr returns, one pointer for
// each of net's TCP and Unix connections. grpc-go answers itself, and
// without end, a stream of a method no service has (Unimplemented), of a
// content-type or :method not gRPC's (415, 405), and a call without its
// message; and a stream reset as soon as it is opened is no call: 20,000
// of each on one connection were taken when a stream earned at its
// opening. It holds each Conn weakly: one gRPC let go is freed, and
// forgotten.
type guardedConns struct {
	m sync.Map // net.Addr → weak.Pointer[h2guard.Conn]
}

// guard returns c as an h2guard.Conn whose streams earn once their call
// reaches a handler, or, when its client's address does not tell it from
// every other connection (one of a listener of its own kind), once they
// are opened.
func (gc *guardedConns) guard(c net.Conn, cuts *h2guard.Cuts) *h2guard.Conn {
	addr, ok := connKey(c.RemoteAddr())
	if !ok || c.RemoteAddr() != addr {
		return h2guard.New(c, h2guard.PrefacePassed, cuts)
	}
	g := h2guard.NewHandled(c, h2guard.PrefacePassed, cuts)
	wp := weak.Make(g)
	if _, taken := gc.m.LoadOrStore(addr, wp); taken {
		return h2guard.New(c, h2guard.PrefacePassed, cuts)
	}
	runtime.AddCleanup(g, func(a net.Addr) { gc.m.CompareAndDelete(a, wp) }, addr)
	return g
}

// connKey returns a, when it is an address of net's TCP or Unix
// connections: a pointer of one connection.
func connKey(a net.Addr) (net.Addr, bool) {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a, a != nil
	case *net.UnixAddr:
		return a, a != nil
	}
	return nil, false
}

// handled tells the Conn of the connection of ctx's call that the call
// reached a handler.
func (gc *guardedConns) handled(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	addr, ok := connKey(p.Addr)
	if !ok {
		return
	}
	if wp, ok := gc.m.Load(addr); ok {
		if g := wp.(weak.Pointer[h2guard.Conn]).Value(); g != nil {
			g.Handled()
		}
	}
}

// unary is the interceptor of unary calls that tells their connection's
// Conn each reached a handler.
func (gc *guardedConns) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	gc.handled(ctx)
	return h(ctx, req)
}

// stream is unary's interceptor of streaming calls (a health Watch).
func (gc *guardedConns) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	gc.handled(ss.Context())
	return h(srv, ss)
}
