package grpcguard_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/grpcguard"
	"github.com/floodgate/floodgate/limiter"
)

// What a charge costs the interceptors when the client leaves at each
// point of a call, and when the handler fails: the handler is the
// upstream, so the costs are those floodgate serve charges for its
// upstream. A count_on charge is final once the call's code is known; a
// reservation goes back in full only when no answer began (a handler that
// panicked, as an upstream that dropped its connection: serve's 502);
// concurrency slots come back however a call or a stream ends.

// leavePolicy counts failed logins (UNAUTHENTICATED, 401) and timed-out
// lookups (DEADLINE_EXCEEDED, 504) by outcome, and holds Hold streams
// to 2 at once.
const leavePolicy = `version: 1
routes:
  - {name: upload, match: {paths: [/test.Leave/Upload]}, upstream: none, grpc_stream: per_message}
  - {name: rest, match: {paths: ["/test.Leave/*"]}, upstream: none}
limits:
  - {name: login, algorithm: sliding_log, limit: 3, window: 1h, count_on: [401], key: global, match: {paths: [/test.Leave/Login]}}
  - {name: timeouts, algorithm: sliding_log, limit: 3, window: 1h, count_on: [504], key: global, match: {paths: [/test.Leave/Lookup]}}
  - {name: slots, algorithm: concurrency, limit: 2, key: global, match: {paths: [/test.Leave/Hold]}}
`

// leaveService is test.Leave. The x-do metadata of a call says how its
// handler ends: "unauth" UNAUTHENTICATED, "late" UNAUTHENTICATED once the
// client has gone, "ctx" the context's own error once the client has
// gone ("slowctx" the same, slowCtxAfter later), "deadline" a plain context.DeadlineExceeded (a backend call that
// timed out, returned as it is), "panic" a panic, anything else OK.
// slowCtxAfter is how long a "slowctx" handler takes to return once its
// context ended.
const slowCtxAfter = 400 * time.Millisecond

type leaveService struct {
	ran     atomic.Int64 // handlers run
	started chan string  // the x-do of each call whose handler started
	ended   chan string  // the x-do of each call once every interceptor returned
	got     chan string  // the x-do of a stream for each message its handler got
}

// gotOne tells got that the handler of the stream that asked for do got
// a message.
func (s *leaveService) gotOne(do string) {
	select {
	case s.got <- do:
	default:
	}
}

func doOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-do"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// leaveEnd is the handlers' common end.
func (s *leaveService) end(ctx context.Context) error {
	s.ran.Add(1)
	do := doOf(ctx)
	select {
	case s.started <- do:
	default:
	}
	switch do {
	case "unauth":
		return status.Error(codes.Unauthenticated, "wrong password")
	case "late":
		<-ctx.Done()
		return status.Error(codes.Unauthenticated, "wrong password")
	case "ctx", "hold":
		<-ctx.Done()
		return ctx.Err()
	case "slowctx":
		<-ctx.Done()
		time.Sleep(slowCtxAfter)
		return ctx.Err()
	case "deadline":
		return fmt.Errorf("lookup: %w", context.DeadlineExceeded)
	case "panic":
		panic("the handler failed")
	}
	return nil
}

func leaveUnary(name string) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) {
				if err := srv.(*leaveService).end(ctx); err != nil {
					return nil, err
				}
				return wrapperspb.String("ok"), nil
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Leave/" + name}, h)
		}}
}

var leaveDesc = grpc.ServiceDesc{
	ServiceName: "test.Leave",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{leaveUnary("Login"), leaveUnary("Lookup"), leaveUnary("Work")},
	Streams: []grpc.StreamDesc{{
		// Hold reads the client's messages until it half-closes (x-do
		// "recv"), or ends as end says.
		StreamName:    "Hold",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			if doOf(st.Context()) == "recv" {
				srv.(*leaveService).ran.Add(1)
				for {
					if err := st.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
						return st.SendMsg(wrapperspb.String("done"))
					} else if err != nil {
						return err
					}
				}
			}
			return srv.(*leaveService).end(st.Context())
		},
	}, {
		// Upload (per_message) counts the messages it is given; with
		// x-do "late" it reads them only once its client has left.
		StreamName:    "Upload",
		ClientStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			s := srv.(*leaveService)
			do := doOf(st.Context())
			if do == "late" {
				s.started <- "late"
				<-st.Context().Done()
			} else {
				select {
				case s.started <- do:
				default:
				}
			}
			for {
				if err := st.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
					return st.SendMsg(wrapperspb.String("done"))
				} else if err != nil {
					return err
				}
				s.ran.Add(1)
				s.gotOne(do)
			}
		},
	}, {
		// Feed (per_stream) reads its client's messages until it
		// half-closes or leaves, telling got of each; with x-do "spend"
		// it sets x-cost, the messages it got, in its trailer as it
		// ends.
		StreamName:    "Feed",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			s := srv.(*leaveService)
			do := doOf(st.Context())
			s.ran.Add(1)
			select {
			case s.started <- do:
			default:
			}
			got := 0
			for {
				err := st.RecvMsg(new(wrapperspb.StringValue))
				if err != nil && do == "spend" {
					// What it did, in the trailer, however the
					// stream ends.
					st.SetTrailer(metadata.Pairs("x-cost", strconv.Itoa(got)))
				}
				if err == io.EOF {
					return st.SendMsg(wrapperspb.String("done"))
				} else if err != nil {
					return err
				}
				got++
				s.gotOne(do)
			}
		},
	}},
}

// recoverUnary and recoverStream turn a handler's panic into INTERNAL,
// as the recovery interceptors of grpc-ecosystem do.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(srv, ss)
}

// leaveRig is test.Leave behind a Guard of leavePolicy (or of policy),
// with the recovery interceptors outside the Guard's (outside) or
// inside them, and before all an interceptor that tells ended when a
// call is over; first, when set, runs before the Guard's.
type leaveRig struct {
	svc  *leaveService
	conn *grpc.ClientConn
}

type rigOptions struct {
	policy       string // default leavePolicy
	recoverInner bool   // the recovery interceptors run inside the Guard's
	first        grpc.UnaryServerInterceptor
	guardOptions guard.Options
}

func newLeaveRig(t *testing.T, o rigOptions) *leaveRig {
	t.Helper()
	if o.policy == "" {
		o.policy = leavePolicy
	}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(o.policy), 0o644); err != nil {
		t.Fatal(err)
	}
	o.guardOptions.ReloadInterval = -1
	g, err := guard.New(guard.File(file), o.guardOptions)
	if err != nil {
		t.Fatal(err)
	}
	svc := &leaveService{started: make(chan string, 64), ended: make(chan string, 256), got: make(chan string, 64)}
	tellUnary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer func() { svc.ended <- doOf(ctx) }()
		return h(ctx, req)
	}
	tellStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer func() { svc.ended <- doOf(ss.Context()) }()
		return h(srv, ss)
	}
	unary := []grpc.UnaryServerInterceptor{tellUnary}
	stream := []grpc.StreamServerInterceptor{tellStream}
	if !o.recoverInner {
		unary, stream = append(unary, recoverUnary), append(stream, recoverStream)
	}
	if o.first != nil {
		unary = append(unary, o.first)
	}
	unary = append(unary, grpcguard.UnaryServerInterceptor(g))
	stream = append(stream, grpcguard.StreamServerInterceptor(g))
	if o.recoverInner {
		unary, stream = append(unary, recoverUnary), append(stream, recoverStream)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	srv.RegisterService(&leaveDesc, svc)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return &leaveRig{svc: svc, conn: conn}
}

// waitEnded waits for the call that asked for do to be over.
func (rig *leaveRig) waitEnded(t *testing.T, do string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case got := <-rig.svc.ended:
			if got == do {
				return
			}
		case <-deadline:
			t.Fatalf("the call %q never ended", do)
		}
	}
}

// waitStarted waits for the handler of the call that asked for do.
func (rig *leaveRig) waitStarted(t *testing.T, do string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case got := <-rig.svc.started:
			if got == do {
				return
			}
		case <-deadline:
			t.Fatalf("the handler of %q never started", do)
		}
	}
}

// call makes a unary call to method with x-do: do, cancelling it once
// leaveWhen (when not nil) returns.
func (rig *leaveRig) call(t *testing.T, method, do string, leaveWhen func()) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-do", do)
	errc := make(chan error, 1)
	var tr metadata.MD
	go func() {
		errc <- rig.conn.Invoke(ctx, "/test.Leave/"+method, wrapperspb.String(do), new(wrapperspb.StringValue), grpc.Trailer(&tr))
	}()
	if leaveWhen != nil {
		leaveWhen()
		cancel()
	}
	err := <-errc
	return tr, err
}

// remaining returns the remaining units of limit name in a trailer.
func remaining(t *testing.T, tr metadata.MD, name string) int {
	t.Helper()
	for _, v := range tr.Get("ratelimit") {
		for item := range strings.SplitSeq(v, ",") {
			item = strings.TrimSpace(item)
			if !strings.HasPrefix(item, `"`+name+`";`) {
				continue
			}
			for p := range strings.SplitSeq(item, ";") {
				if r, ok := strings.CutPrefix(p, "r="); ok {
					if n, err := strconv.Atoi(r); err == nil {
						return n
					}
				}
			}
		}
	}
	t.Fatalf("no %q in the trailer %v", name, tr)
	return 0
}

// counted returns the calls a count_on limit of 3 on method holds: an OK
// call reserves one (the trailer says what is left after it) and costs
// nothing once it ends.
func (rig *leaveRig) counted(t *testing.T, method, limit string) int {
	t.Helper()
	tr, err := rig.call(t, method, "ok", nil)
	if status.Code(err) == codes.ResourceExhausted {
		return 3
	}
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	rig.waitEnded(t, "ok")
	return 3 - 1 - remaining(t, tr, limit)
}

// TestLeaveUnaryCountOn: a unary call counted by its code is charged once
// its handler's code is known, whatever the client did before, as the
// code the client is sent says: a plain context error the handler returns
// is the code gRPC sends for it (DEADLINE_EXCEEDED, 504; CANCELLED, 499),
// not UNKNOWN. A handler that panicked gave no answer: the reservation
// goes back.
func TestLeaveUnaryCountOn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, method, limit, do string
		leave, recoverInner     bool
		code                    codes.Code // what the client gets (when it stays)
		charged                 int
	}{
		{"UNAUTHENTICATED", "Login", "login", "unauth", false, false, codes.Unauthenticated, 1},
		{"UNAUTHENTICATED after the client left", "Login", "login", "late", true, false, codes.Canceled, 1},
		{"the context's error after the client left", "Login", "login", "ctx", true, false, codes.Canceled, 0},
		{"a panic, recovered outside the Guard", "Login", "login", "panic", false, false, codes.Internal, 0},
		{"a panic, recovered inside the Guard (INTERNAL)", "Login", "login", "panic", false, true, codes.Internal, 0},
		{"a plain context.DeadlineExceeded", "Lookup", "timeouts", "deadline", false, false, codes.DeadlineExceeded, 1},
		{"OK", "Login", "login", "ok", false, false, codes.OK, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rig := newLeaveRig(t, rigOptions{recoverInner: c.recoverInner})
			var leave func()
			if c.leave {
				leave = func() { rig.waitStarted(t, c.do) }
			}
			_, err := rig.call(t, c.method, c.do, leave)
			if !c.leave && status.Code(err) != c.code {
				t.Errorf("the call: %v, want %v", err, c.code)
			}
			rig.waitEnded(t, c.do)
			if got := rig.counted(t, c.method, c.limit); got != c.charged {
				t.Errorf("counted: %d, want %d", got, c.charged)
			}
		})
	}
}

// openHold opens a Hold stream with x-do: do and waits for its handler.
func (rig *leaveRig) openHold(t *testing.T, ctx context.Context, do string) grpc.ClientStream {
	t.Helper()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-do", do)
	st, err := rig.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/test.Leave/Hold")
	if err != nil {
		t.Fatal(err)
	}
	// io.EOF: the handler ended the stream before the message went (a
	// panic at once); RecvMsg tells how.
	if err := st.SendMsg(wrapperspb.String(do)); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return st
}

// slotsHeld returns the slots of Hold held by streams in flight: a probe
// stream takes one (its trailer says what is left).
func (rig *leaveRig) slotsHeld(t *testing.T) int {
	t.Helper()
	trailer, err := rig.probe(t)
	if status.Code(err) == codes.ResourceExhausted {
		return 2
	}
	if err != io.EOF {
		t.Fatalf("probe: %v", err)
	}
	return 2 - 1 - remaining(t, trailer, "slots")
}

// probe opens a Hold stream with x-do: probe and half-closes it: its
// trailer, and the error that ended it (io.EOF: OK, and its handler is
// over).
func (rig *leaveRig) probe(t *testing.T) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := rig.openHold(t, ctx, "probe")
	_ = st.CloseSend()
	err := st.RecvMsg(new(wrapperspb.StringValue))
	if err == io.EOF {
		rig.waitEnded(t, "probe")
	}
	return st.Trailer(), err
}

// runHold opens a Hold stream with x-do: do and ends it: the client
// leaves (cancel) once its handler runs, or half-closes and reads it to
// its end. It returns once the handler is over.
func (rig *leaveRig) runHold(t *testing.T, ctx context.Context, cancel context.CancelFunc, do string, leave bool) {
	t.Helper()
	st := rig.openHold(t, ctx, do)
	if leave {
		rig.waitStarted(t, do)
		cancel()
	} else {
		_ = st.CloseSend()
		for st.RecvMsg(new(wrapperspb.StringValue)) == nil {
		}
	}
	rig.waitEnded(t, do)
}

// TestLeaveStreamSlots: a stream's concurrency slot comes back however
// it ends: the client cancels it while its handler runs, the handler
// returns an error or panics, the client half-closes and the handler
// ends. Three of each against a limit of 2: a slot kept would show.
func TestLeaveStreamSlots(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, do     string
		cancel       bool
		recoverInner bool
	}{
		{"the client cancels", "hold", true, false},
		{"the handler panics, recovered outside", "panic", false, false},
		{"the handler panics, recovered inside", "panic", false, true},
		{"the handler returns an error", "unauth", false, false},
		{"the client half-closes", "recv", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rig := newLeaveRig(t, rigOptions{recoverInner: c.recoverInner})
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				rig.runHold(t, ctx, cancel, c.do, c.cancel)
				cancel()
			}
			if n := rig.slotsHeld(t); n != 0 {
				t.Errorf("%d slots held once the streams ended, want 0", n)
			}
		})
	}
}

// TestManyStreamsHoldTheirSlots: many streams opened at once, on many
// connections, against a concurrency limit of 2: 2 pass and hold their
// slots, the rest are refused before their handlers run, and once all
// are cancelled every slot is back.
func TestManyStreamsHoldTheirSlots(t *testing.T) {
	t.Parallel()
	rig := newLeaveRig(t, rigOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 50
	errs := make(chan error, n)
	for range n {
		go func() {
			st, err := rig.conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-do", "hold"),
				&grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/test.Leave/Hold")
			if err == nil {
				err = st.RecvMsg(new(wrapperspb.StringValue))
			}
			errs <- err
		}()
	}
	refused := 0
	for refused < n-2 {
		select {
		case err := <-errs:
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("a stream over the limit: %v, want RESOURCE_EXHAUSTED", err)
			}
			refused++
		case <-time.After(time.Minute):
			t.Fatalf("%d streams refused, want %d", refused, n-2)
		}
	}
	rig.waitStarted(t, "hold")
	rig.waitStarted(t, "hold")
	if got := rig.svc.ran.Load(); got != 2 {
		t.Errorf("%d handlers ran, want 2", got)
	}
	cancel()
	for range 2 {
		<-errs
	}
	for range n { // the refused streams ended too
		rig.waitEnded(t, "hold")
	}
	if n := rig.slotsHeld(t); n != 0 {
		t.Errorf("%d slots held once every stream ended, want 0", n)
	}
}

// TestHugeMetadata: metadata near grpc-go's 16 MiB bound is read as any
// other: two keys of 4 MiB that differ in their last byte are counted
// apart, the same one together, and neither is echoed in the trailer.
func TestHugeMetadata(t *testing.T) {
	t.Parallel()
	rig := newLeaveRig(t, rigOptions{policy: `version: 1
limits:
  - {name: tenant, rate: 2, per: 1h, key: "header:x-tenant", match: {paths: [/test.Leave/Work]}}
`})
	long := strings.Repeat("a", 4<<20)
	for _, tenant := range []string{long + "1", long + "2"} {
		for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			var tr metadata.MD
			err := rig.conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant), "/test.Leave/Work",
				wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Trailer(&tr))
			cancel()
			if status.Code(err) != want || len(first(tr, "ratelimit")) > 100 {
				t.Errorf("tenant ...%s, call %d: %v (trailer of %d bytes), want %v", tenant[len(tenant)-1:], i+1, err, len(first(tr, "ratelimit")), want)
			}
		}
	}
}

// queueWatch is a guard.Metrics that tells queued when a request starts
// waiting in a leaky queue.
type queueWatch struct{ queued chan struct{} }

func (queueWatch) ObserveDecision(*limiter.Request, *limiter.Result) {}
func (queueWatch) Rejected(limiter.FrontEnd, string, int)            {}
func (queueWatch) Upstream(string, int)                              {}
func (q queueWatch) Queued(_ string, delta int) {
	if delta > 0 {
		q.queued <- struct{}{}
	}
}

// TestQueuedMessageClientGone: a message of a per_message stream that
// waits in a leaky queue when its client leaves is refunded and never
// given to the handler: RecvMsg ends the stream CANCELLED, as a request
// whose client leaves the queue never reaches its upstream.
func TestQueuedMessageClientGone(t *testing.T) {
	t.Parallel()
	q := queueWatch{queued: make(chan struct{}, 4)}
	rig := newLeaveRig(t, rigOptions{policy: `version: 1
routes:
  - {name: upload, match: {paths: [/test.Leave/Upload]}, upstream: none, grpc_stream: per_message}
limits:
  - {name: shaped, algorithm: leaky_queue, rate: 1, per: 1h, burst: 3, key: global, match: {routes: [upload]}}
`, guardOptions: guard.Options{Metrics: q}})
	// No deadline: a message whose place would come after the stream's
	// deadline is refused at once (TestQueuedPastDeadlineIsRefused).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := rig.conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-do", "queued"), &grpc.StreamDesc{ClientStreams: true}, "/test.Leave/Upload")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"first", "second"} { // the second waits an hour
		if err := st.SendMsg(wrapperspb.String(m)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-q.queued:
	case <-time.After(time.Minute):
		t.Fatal("the second message never waited in the queue")
	}
	cancel()
	rig.waitEnded(t, "queued")
	if n := rig.svc.ran.Load(); n != 1 {
		t.Errorf("the handler was given %d messages, want the first alone", n)
	}
}

// TestLeaveUnarySlots: a unary call's concurrency slot comes back however
// it ends: its client cancels before the Guard decides it (while an
// interceptor in front holds it), while its handler runs, or once its
// handler answered; the handler returns an error, or panics (recovered
// outside the Guard's interceptor or inside). Three of each against a
// limit of 2: a slot kept would show.
func TestLeaveUnarySlots(t *testing.T) {
	t.Parallel()
	const policy = `version: 1
limits:
  - {name: slots, algorithm: concurrency, limit: 2, key: global, match: {paths: [/test.Leave/Work]}}
`
	for _, c := range []struct {
		name, do     string
		leave        string // "before" the decision, "during" the handler, "after" its answer
		recoverInner bool
		code         codes.Code // what the client gets (when it stays)
	}{
		{"the client cancels before the decision", "gone", "before", false, 0},
		{"the client cancels while the handler runs", "hold", "during", false, 0},
		{"the client cancels once the handler answered", "ok", "after", false, 0},
		{"the handler returns an error", "unauth", "", false, codes.Unauthenticated},
		{"the handler panics, recovered outside", "panic", "", false, codes.Internal},
		{"the handler panics, recovered inside", "panic", "", true, codes.Internal},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan struct{}, 4)
			// holdUntilGone holds a call that asked for "gone" until its
			// client has left, as an authentication interceptor that
			// takes its time would.
			holdUntilGone := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if doOf(ctx) == "gone" {
					arrived <- struct{}{}
					<-ctx.Done()
				}
				return h(ctx, req)
			}
			rig := newLeaveRig(t, rigOptions{policy: policy, recoverInner: c.recoverInner, first: holdUntilGone})
			for range 3 {
				var leave func()
				switch c.leave {
				case "before":
					leave = func() { <-arrived }
				case "during":
					leave = func() { rig.waitStarted(t, c.do) }
				case "after":
					leave = func() { rig.waitEnded(t, c.do) }
				}
				_, err := rig.call(t, "Work", c.do, leave)
				if c.leave == "" && status.Code(err) != c.code {
					t.Errorf("the call: %v, want %v", err, c.code)
				}
				if c.leave != "after" {
					rig.waitEnded(t, c.do)
				}
			}
			tr, err := rig.call(t, "Work", "probe", nil)
			if err != nil {
				t.Fatalf("a call once the others ended: %v, want OK (a slot kept)", err)
			}
			rig.waitEnded(t, "probe")
			if held := 2 - 1 - remaining(t, tr, "slots"); held != 0 {
				t.Errorf("%d slots held once the calls ended, want 0", held)
			}
		})
	}
}

// earlyPolicy charges a Feed stream once when it opens (per_stream), and
// each message of an Upload stream as its handler receives it
// (per_message), with one message decided at a time.
const earlyPolicy = `version: 1
routes:
  - {name: upload, match: {paths: [/test.Leave/Upload]}, upstream: none, grpc_stream: per_message}
  - {name: rest, match: {paths: ["/test.Leave/*"]}, upstream: none}
limits:
  - {name: streams, rate: 100, per: 1h, key: global, match: {paths: [/test.Leave/Feed]}}
  - {name: parts, rate: 100, per: 1h, key: global, match: {routes: [upload]}}
  - {name: partslots, algorithm: concurrency, limit: 1, key: global, match: {routes: [upload]}}
`

// TestLeaveStreamEarly: a stream its client cancels after 0, 1 and 3
// messages its handler got costs the work that was done: a per_stream
// stream its one unit, charged when it opened (its handler ran); a
// per_message stream the messages its handler was given, no more and no
// fewer, and no message slot stays held.
func TestLeaveStreamEarly(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"Feed", "Upload"} {
		for _, n := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("%s cancelled after %d", method, n), func(t *testing.T) {
				t.Parallel()
				rig := newLeaveRig(t, rigOptions{policy: earlyPolicy})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				st, err := rig.conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-do", "early"),
					&grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/test.Leave/"+method)
				if err != nil {
					t.Fatal(err)
				}
				rig.waitStarted(t, "early")
				for i := range n {
					if err := st.SendMsg(wrapperspb.String("part")); err != nil {
						t.Fatal(err)
					}
					select {
					case <-rig.svc.got:
					case <-time.After(time.Minute):
						t.Fatalf("the handler never got message %d", i+1)
					}
				}
				cancel()
				rig.waitEnded(t, "early")

				// A probe: a stream of one message, half-closed.
				pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
				defer pcancel()
				probe, err := rig.conn.NewStream(metadata.AppendToOutgoingContext(pctx, "x-do", "probe"),
					&grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/test.Leave/"+method)
				if err != nil {
					t.Fatal(err)
				}
				if err := probe.SendMsg(wrapperspb.String("part")); err != nil {
					t.Fatal(err)
				}
				_ = probe.CloseSend()
				for {
					if err := probe.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
						break
					} else if err != nil {
						t.Fatalf("the probe: %v (a message slot kept?)", err)
					}
				}
				rig.waitEnded(t, "probe")
				limit, want := "parts", n
				if method == "Feed" {
					limit, want = "streams", 1
				}
				if got := 100 - 1 - remaining(t, probe.Trailer(), limit); got != want {
					t.Errorf("the stream cost %d, want %d", got, want)
				}
				if method == "Upload" {
					if r := remaining(t, probe.Trailer(), "partslots"); r != 0 {
						t.Errorf("partslots: %d remaining while the probe's message was decided, want 0", r)
					}
				}
			})
		}
	}
}

// TestLeaveStreamCountOn: a stream counted by its code (per_stream) is
// charged as a unary call is, by the code its handler ends it with,
// whatever its client did before: UNAUTHENTICATED counts, also when the
// handler gives it once its client cancelled the stream; the context's
// own error after the client left (CANCELLED) does not; a handler that
// panicked gave no answer, and its reservation goes back.
func TestLeaveStreamCountOn(t *testing.T) {
	t.Parallel()
	const policy = `version: 1
limits:
  - {name: login, algorithm: sliding_log, limit: 3, window: 1h, count_on: [401], key: global, match: {paths: [/test.Leave/Hold]}}
`
	for _, c := range []struct {
		name, do     string
		leave        bool
		recoverInner bool
		charged      int
	}{
		{"UNAUTHENTICATED", "unauth", false, false, 1},
		{"UNAUTHENTICATED after the client cancelled", "late", true, false, 1},
		{"the context's error after the client cancelled", "ctx", true, false, 0},
		{"a panic, recovered outside the Guard", "panic", false, false, 0},
		{"a panic, recovered inside the Guard (INTERNAL)", "panic", false, true, 0},
		{"OK once the client half-closed", "recv", false, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rig := newLeaveRig(t, rigOptions{policy: policy, recoverInner: c.recoverInner})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rig.runHold(t, ctx, cancel, c.do, c.leave)

			trailer, err := rig.probe(t)
			if err != io.EOF {
				t.Fatalf("probe: %v", err)
			}
			if got := 3 - 1 - remaining(t, trailer, "login"); got != c.charged {
				t.Errorf("counted: %d, want %d", got, c.charged)
			}
		})
	}
}

// TestLeaveActualCost: a call whose cost its answer tells (actual) is
// charged for the work its handler did, however the client left: a
// handler that ends with its context's own error once its client
// cancelled, or once the client's deadline passed, gave no answer of its
// own, and pays what it told in its metadata, else its estimate, as a
// handler behind the middleware that writes nothing once its client left.
// An answer that is not a success (UNAUTHENTICATED) costs nothing, and a
// handler that panicked gave no answer: the reservation goes back.
func TestLeaveActualCost(t *testing.T) {
	t.Parallel()
	const policy = `version: 1
limits:
  - {name: tokens, rate: 1000, per: 1h, key: global, match: {paths: [/test.Leave/Feed, /test.Leave/Work]}, estimate: {header: x-estimate, default: 100}, actual: {header: x-cost}}
`
	for _, c := range []struct {
		name, method, do string
		msgs             int    // messages the stream's handler gets first
		end              string // "close" (half-close), "cancel", "deadline", or "" (the call ends)
		charged          int
	}{
		{"a stream telling 3, half-closed", "Feed", "spend", 3, "close", 3},
		{"a stream telling 3, cancelled", "Feed", "spend", 3, "cancel", 3},
		{"a stream telling nothing, cancelled", "Feed", "early", 1, "cancel", 100},
		{"a unary call cancelled while its handler runs", "Work", "ctx", 0, "cancel", 100},
		{"a unary call past its deadline while its handler runs", "Work", "ctx", 0, "deadline", 100},
		{"UNAUTHENTICATED", "Work", "unauth", 0, "", 0},
		{"a panic", "Work", "panic", 0, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rig := newLeaveRig(t, rigOptions{policy: policy})
			timeout := time.Minute
			if c.end == "deadline" {
				timeout = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "x-do", c.do)
			switch c.method {
			case "Feed":
				st, err := rig.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/test.Leave/Feed")
				if err != nil {
					t.Fatal(err)
				}
				rig.waitStarted(t, c.do)
				for range c.msgs {
					if err := st.SendMsg(wrapperspb.String("part")); err != nil {
						t.Fatal(err)
					}
					<-rig.svc.got
				}
				if c.end == "cancel" {
					cancel()
				} else {
					_ = st.CloseSend()
					for st.RecvMsg(new(wrapperspb.StringValue)) == nil {
					}
				}
			default:
				errc := make(chan error, 1)
				go func() {
					errc <- rig.conn.Invoke(ctx, "/test.Leave/Work", wrapperspb.String(c.do), new(wrapperspb.StringValue))
				}()
				if c.end == "cancel" {
					rig.waitStarted(t, c.do)
					cancel()
				}
				<-errc
			}
			rig.waitEnded(t, c.do)

			if got := tokensCharged(t, rig); got != c.charged {
				t.Errorf("charged %d, want %d", got, c.charged)
			}
		})
	}
}

// tokensCharged returns what the "tokens" limit of 1,000 (an estimate
// from x-estimate, an actual cost from x-cost) has charged, read by a
// probe of estimate 1 that tells no cost.
func tokensCharged(t *testing.T, rig *leaveRig) int {
	t.Helper()
	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	var tr metadata.MD
	if err := rig.conn.Invoke(metadata.AppendToOutgoingContext(pctx, "x-do", "probe", "x-estimate", "1"), "/test.Leave/Work",
		wrapperspb.String("probe"), new(wrapperspb.StringValue), grpc.Trailer(&tr)); err != nil {
		t.Fatalf("probe: %v", err)
	}
	return 1000 - 1 - remaining(t, tr, "tokens")
}

// TestLeaveCancelCountsByCode: a call its client cancels while its
// handler runs, the handler ending with its context's error, is counted
// by that code (CANCELLED, 499) on a limit that counts it by outcome: the
// code stays what a count_on limit sees, however the client left. A limit
// charged by actual cost on the same call still charges the work done
// (its estimate of 100 each): the code is the call's own end, not a
// failed answer. Before, a count_on limit beside it made it charge 0.
func TestLeaveCancelCountsByCode(t *testing.T) {
	t.Parallel()
	rig := newLeaveRig(t, rigOptions{policy: `version: 1
limits:
  - {name: abandoned, algorithm: sliding_log, limit: 3, window: 1h, count_on: [499], key: global, match: {paths: [/test.Leave/Work]}}
  - {name: tokens, rate: 1000, per: 1h, key: global, match: {paths: [/test.Leave/Work]}, estimate: {header: x-estimate, default: 100}, actual: {header: x-cost}}
`})
	for range 2 {
		if _, err := rig.call(t, "Work", "ctx", func() { rig.waitStarted(t, "ctx") }); status.Code(err) != codes.Canceled {
			t.Fatalf("a call its client cancelled: %v", err)
		}
		rig.waitEnded(t, "ctx")
	}
	if got := tokensCharged(t, rig); got != 200 {
		t.Errorf("tokens charged for 2 cancelled calls beside a count_on limit: %d, want 200 (their estimates)", got)
	}
	if got := rig.counted(t, "Work", "abandoned"); got != 2 {
		t.Errorf("counted: %d, want 2", got)
	}
}

// TestLeaveDeadlineCountsAsTimeout: a call whose client's deadline passes
// while its handler waits, the handler ending with its context's error,
// is counted as DEADLINE_EXCEEDED (504) on a limit that counts timeouts,
// unary or streaming: the client cancels the call as its deadline passes,
// which reaches the server before the server's own timer for it, and the
// context ends CANCELLED. A call its client cancels long before its
// deadline stays CANCELLED (499). Before, no timed-out call was counted
// as 504 in 30 tries.
func TestLeaveDeadlineCountsAsTimeout(t *testing.T) {
	t.Parallel()
	const policy = `version: 1
limits:
  - {name: timeouts, algorithm: sliding_log, limit: 3, window: 1h, count_on: [504], key: global, match: {paths: [/test.Leave/Work, /test.Leave/Hold]}}
  - {name: abandoned, algorithm: sliding_log, limit: 3, window: 1h, count_on: [499], key: global, match: {paths: [/test.Leave/Work, /test.Leave/Hold]}}
`
	const timeout = 800 * time.Millisecond // a slack of 100 ms: a loaded machine reads a call late
	t.Run("unary", func(t *testing.T) {
		t.Parallel()
		rig := newLeaveRig(t, rigOptions{policy: policy})
		for range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := rig.conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-do", "ctx"), "/test.Leave/Work",
				wrapperspb.String("ctx"), new(wrapperspb.StringValue))
			cancel()
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("a call past its deadline: %v", err)
			}
			rig.waitStarted(t, "ctx")
			rig.waitEnded(t, "ctx")
		}
		if _, err := rig.call(t, "Work", "ctx", func() { rig.waitStarted(t, "ctx") }); status.Code(err) != codes.Canceled {
			t.Fatalf("a call its client cancelled: %v", err)
		}
		rig.waitEnded(t, "ctx")
		// Cancelled long before its deadline by a client that leaves,
		// its handler returns after the deadline: still a cancellation.
		ctx, cancel := context.WithTimeout(context.Background(), slowCtxAfter/2)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			errc <- rig.conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-do", "slowctx"), "/test.Leave/Work",
				wrapperspb.String("slowctx"), new(wrapperspb.StringValue))
		}()
		rig.waitStarted(t, "slowctx")
		cancel()
		if err := <-errc; status.Code(err) != codes.Canceled {
			t.Fatalf("a call its client cancelled: %v", err)
		}
		rig.waitEnded(t, "slowctx")
		if got := rig.counted(t, "Work", "timeouts"); got != 2 {
			t.Errorf("timeouts counted: %d, want 2", got)
		}
		if got := rig.counted(t, "Work", "abandoned"); got != 2 {
			t.Errorf("cancellations counted: %d, want 2", got)
		}
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		rig := newLeaveRig(t, rigOptions{policy: policy})
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		st := rig.openHold(t, ctx, "hold")
		if err := st.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("a stream past its deadline: %v", err)
		}
		rig.waitStarted(t, "hold")
		rig.waitEnded(t, "hold")
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
		defer cancel2()
		rig.runHold(t, ctx2, cancel2, "hold", true)
		trailer, err := rig.probe(t)
		if err != io.EOF {
			t.Fatalf("probe: %v", err)
		}
		if got := 3 - 1 - remaining(t, trailer, "timeouts"); got != 1 {
			t.Errorf("timeouts counted: %d, want 1", got)
		}
		if got := 3 - 1 - remaining(t, trailer, "abandoned"); got != 1 {
			t.Errorf("cancellations counted: %d, want 1", got)
		}
	})
}
