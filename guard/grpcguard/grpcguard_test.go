package grpcguard_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/grpcguard"
)

// echo is a real gRPC service, test.Echo: unary methods that answer
// their message (Say, Keyed, Me, Fast; Quick after 2 ms, or UNAVAILABLE
// when asked "down"), one that answers NOT_FOUND unless
// asked for "known" (Find), one that sets a cost in its trailer (Spend), a
// server stream (Watch) sending three messages, a client stream (Upload)
// counting what it receives (Upload, and Drip on a route with an adaptive
// overload limit), and a server stream (Hold) that stays open until
// release is closed.
type echo struct {
	calls    atomic.Int64 // unary calls that reached a handler
	received atomic.Int64 // messages Upload and Drip received
	held     chan struct{}
	release  chan struct{}
	guard    *guard.Guard // the Guard in front
}

func unary(name string, f func(ctx context.Context, in string) (string, error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				srv.(*echo).calls.Add(1)
				out, err := f(ctx, req.(*wrapperspb.StringValue).GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/" + name}, h)
		}}
}

func answer(_ context.Context, in string) (string, error) { return "ok " + in, nil }

// busy holds the calls of Busy (TestOverloadShedsUnavailable alone calls
// it, and sets it): each tells in, then waits for out to close.
var busy atomic.Pointer[struct{ in, out chan struct{} }]

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		unary("Say", answer), unary("Keyed", answer), unary("Me", answer), unary("Fast", answer), unary("Queued", answer),
		unary("Quick", func(ctx context.Context, in string) (string, error) {
			time.Sleep(2 * time.Millisecond) // some work, beside which the call's own overhead is noise
			if in == "down" {
				return "", status.Error(codes.Unavailable, "overloaded")
			}
			return answer(ctx, in)
		}),
		unary("Find", func(_ context.Context, in string) (string, error) {
			if in != "known" {
				return "", status.Error(codes.NotFound, "no such thing")
			}
			return "found", nil
		}),
		unary("Busy", func(context.Context, string) (string, error) {
			b := busy.Load()
			b.in <- struct{}{}
			<-b.out
			return "done", nil
		}),
		unary("Spend", func(ctx context.Context, in string) (string, error) {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-cost", in))
			return "spent " + in, nil
		}),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(_ any, st grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := st.RecvMsg(in); err != nil {
				return err
			}
			for i := range 3 {
				if err := st.SendMsg(wrapperspb.String(fmt.Sprintf("%s %d", in.GetValue(), i))); err != nil {
					return err
				}
			}
			return nil
		},
	}, {
		StreamName:    "Upload",
		ClientStreams: true,
		Handler:       store,
	}, {
		StreamName:    "Drip",
		ClientStreams: true,
		Handler:       store,
	}, {
		StreamName:    "Hold",
		ServerStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			e := srv.(*echo)
			in := new(wrapperspb.StringValue)
			if err := st.RecvMsg(in); err != nil {
				return err
			}
			if err := st.SendMsg(wrapperspb.String("holding")); err != nil {
				return err
			}
			e.held <- struct{}{}
			select {
			case <-e.release:
			case <-st.Context().Done():
			}
			return nil
		},
	}},
}

// store is a client stream's handler: it counts the messages it
// receives, and answers their number once the client closes.
func store(srv any, st grpc.ServerStream) error {
	n := 0
	for {
		in := new(wrapperspb.StringValue)
		if err := st.RecvMsg(in); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		n++
		srv.(*echo).received.Add(1)
	}
	return st.SendMsg(wrapperspb.String(fmt.Sprintf("stored %d", n)))
}

// secret is the HS256 secret of the test's tokens (not a real one).
var secret = []byte("a test secret of at least 32 bytes, not a real one")

// policy is the test's policy file; %s is the SHA-256 of key-gold.
const policy = `version: 1
server:
  trusted_proxies: [127.0.0.1/32, "::1/128"]
  unknown_key_limit: {rate: 100, per: 1h}
  user:
    jwt: {alg: HS256, key_file: secret.txt}
routes:
  - {name: keyed, match: {paths: [/test.Echo/Keyed]}, upstream: none, api_key_required: true}
  - {name: me, match: {paths: [/test.Echo/Me]}, upstream: none}
  - {name: upload, match: {paths: [/test.Echo/Upload]}, upstream: none, grpc_stream: per_message}
  - {name: busy, match: {paths: [/test.Echo/Busy]}, upstream: none, overload: {limit: 1, tier: critical}}
  - name: adaptive
    match: {paths: [/test.Echo/Drip, /test.Echo/Quick]}
    upstream: none
    overload: {adaptive: {min: 1, max: 64, initial: 16, window: 300ms, min_samples: 1}, tier: critical}
  - {name: echo, match: {paths: ["/test.Echo/*"]}, upstream: none}
plans:
  - {name: gold, rate: 100, per: 1h, quota: {limit: 2, period: DAY}, routes: [keyed]}
keys:
  - {name: gold-1, plan: gold, sha256: %s}
limits:
  - {name: say, rate: 2, per: 1h, match: {paths: [/test.Echo/Say]}}
  - {name: watch, rate: 1, per: 1h, match: {paths: [/test.Echo/Watch]}}
  - {name: upload, rate: 3, per: 1h, match: {routes: [upload]}}
  - {name: per-user, rate: 1, per: 1h, key: user, match: {routes: [me]}}
  - {name: not-found, algorithm: sliding_log, limit: 1, window: 1h, count_on: [404], match: {paths: [/test.Echo/Find]}}
  - {name: fast, rate: 10, per: 1s, burst: 1, key: "header:x-client", match: {paths: [/test.Echo/Fast]}}
  - {name: hold, algorithm: concurrency, limit: 1, match: {paths: [/test.Echo/Hold]}}
  - {name: spend, rate: 10, per: 1h, key: global, match: {paths: [/test.Echo/Spend]}, actual: {header: x-cost}}
  - {name: queued, algorithm: leaky_queue, rate: 1, per: 1h, burst: 2, key: global, match: {paths: [/test.Echo/Queued]}}
`

// start serves test.Echo behind a Guard of the policy on a loopback port
// and returns a connection to it with the given client options.
func start(t *testing.T, opts ...grpc.DialOption) (*echo, *grpc.ClientConn) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("key-gold"))
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, fmt.Appendf(nil, policy, hex.EncodeToString(sum[:])), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(guard.File(file), guard.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor(g)),
		grpc.StreamInterceptor(grpcguard.StreamServerInterceptor(g)))
	e := &echo{held: make(chan struct{}, 4), release: make(chan struct{}), guard: g}
	srv.RegisterService(&echoDesc, e)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
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
	return e, conn
}

// ctxWith returns a context with a deadline and outgoing metadata of
// key-value pairs.
func ctxWith(t *testing.T, kv ...string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	return ctx
}

// say calls a unary method and returns its error and trailer.
func say(ctx context.Context, conn *grpc.ClientConn, method, in string) (string, metadata.MD, error) {
	var tr metadata.MD
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, "/test.Echo/"+method, wrapperspb.String(in), out, grpc.Trailer(&tr))
	return out.GetValue(), tr, err
}

// retryInfo returns the RetryInfo delay of a status error.
func retryInfo(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// first returns the first value of a metadata key.
func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// TestUnary: a unary call over its limit is refused with
// RESOURCE_EXHAUSTED and a RetryInfo of the engine's wait, before its
// handler runs; every call a limit covered carries the RateLimit fields
// as trailing metadata.
func TestUnary(t *testing.T) {
	t.Parallel()
	e, conn := start(t)
	ctx := ctxWith(t)
	for i, wantR := range []string{"1", "0"} {
		out, tr, err := say(ctx, conn, "Say", "hi")
		if err != nil || out != "ok hi" {
			t.Fatalf("call %d: %q, %v", i+1, out, err)
		}
		if got := first(tr, "ratelimit"); !strings.HasPrefix(got, `"say";r=`+wantR+";t=") {
			t.Errorf("call %d: ratelimit trailer %q, want r=%s", i+1, got, wantR)
		}
		if got := first(tr, "ratelimit-policy"); got != `"say";q=2;w=3600` {
			t.Errorf("call %d: ratelimit-policy trailer %q", i+1, got)
		}
	}
	_, tr, err := say(ctx, conn, "Say", "hi")
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || s.Message() != "Too Many Requests" {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED Too Many Requests", err)
	}
	d, ok := retryInfo(err)
	if !ok || d < 29*time.Minute || d > 30*time.Minute {
		t.Errorf("RetryInfo %v (%v), want the bucket's 30 minutes to the next unit", d, ok)
	}
	if got := first(tr, "retry-after"); got != "1800" {
		t.Errorf("retry-after trailer %q, want 1800", got)
	}
	if got := first(tr, "ratelimit"); !strings.HasPrefix(got, `"say";r=0;t=`) {
		t.Errorf("ratelimit trailer of the refusal %q", got)
	}
	if n := e.calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want the 2 calls allowed", n)
	}
}

// TestPeerThroughTrustedProxy: a call from a trusted proxy (loopback) is
// counted as the client its x-forwarded-for names; each client has its
// own count.
func TestPeerThroughTrustedProxy(t *testing.T) {
	t.Parallel()
	_, conn := start(t)
	for _, client := range []string{"203.0.113.1", "203.0.113.2"} {
		ctx := ctxWith(t, "x-forwarded-for", client)
		for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
			if _, _, err := say(ctx, conn, "Say", "hi"); status.Code(err) != want {
				t.Errorf("client %s, call %d: %v, want %v", client, i+1, err, want)
			}
		}
	}
}

// TestAPIKeyFromMetadata: on a route that requires an API key, a call
// without one or with an unknown one is PERMISSION_DENIED; a known key's
// plan quota of 2 a day gives RESOURCE_EXHAUSTED Limit Exceeded on the
// third call.
func TestAPIKeyFromMetadata(t *testing.T) {
	t.Parallel()
	e, conn := start(t)
	for _, ctx := range []context.Context{ctxWith(t), ctxWith(t, "x-api-key", "key-nobody")} {
		if _, _, err := say(ctx, conn, "Keyed", "hi"); status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != "Forbidden" {
			t.Errorf("no key or an unknown one: %v, want PERMISSION_DENIED Forbidden", err)
		}
	}
	ctx := ctxWith(t, "x-api-key", "key-gold")
	for i := range 2 {
		if _, tr, err := say(ctx, conn, "Keyed", "hi"); err != nil || !strings.Contains(first(tr, "ratelimit"), `"gold.quota";r=`) {
			t.Errorf("call %d with the key: %v, trailer %v", i+1, err, tr)
		}
	}
	_, _, err := say(ctx, conn, "Keyed", "hi")
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || s.Message() != "Limit Exceeded" {
		t.Errorf("past the quota: %v, want RESOURCE_EXHAUSTED Limit Exceeded", err)
	}
	if n := e.calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}

// TestUserFromVerifiedToken: the user of a verified token is counted
// wherever it calls from; a forged token is UNAUTHENTICATED with the
// bearer challenge in the trailer.
func TestUserFromVerifiedToken(t *testing.T) {
	t.Parallel()
	_, conn := start(t)
	sign := func(key []byte) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	alice := sign(secret)
	if _, _, err := say(ctxWith(t, "authorization", alice, "x-forwarded-for", "203.0.113.1"), conn, "Me", "hi"); err != nil {
		t.Fatalf("alice: %v", err)
	}
	_, tr, err := say(ctxWith(t, "authorization", alice, "x-forwarded-for", "203.0.113.2"), conn, "Me", "hi")
	if status.Code(err) != codes.ResourceExhausted || !strings.HasPrefix(first(tr, "ratelimit"), `"per-user";r=0`) {
		t.Errorf("alice from elsewhere: %v, trailer %v; want her per-user limit used up", err, tr)
	}
	_, tr, err = say(ctxWith(t, "authorization", sign([]byte("another secret of at least 32 bytes!!"))), conn, "Me", "hi")
	if status.Code(err) != codes.Unauthenticated || first(tr, "www-authenticate") != `Bearer error="invalid_token"` {
		t.Errorf("a forged token: %v, trailer %v; want UNAUTHENTICATED with the bearer challenge", err, tr)
	}
	if _, _, err := say(ctxWith(t), conn, "Me", "hi"); err != nil {
		t.Errorf("no token (no user, not counted per user): %v", err)
	}
}

// TestServerStreamPerStream: a server stream is decided once when it
// opens: the first gets all its messages, the second is refused before
// its handler runs, with the RateLimit fields in its trailer.
func TestServerStreamPerStream(t *testing.T) {
	t.Parallel()
	_, conn := start(t)
	watch := func() ([]string, metadata.MD, error) {
		ctx := ctxWith(t)
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Echo/Watch")
		if err != nil {
			return nil, nil, err
		}
		if err := st.SendMsg(wrapperspb.String("tick")); err != nil {
			return nil, nil, err
		}
		if err := st.CloseSend(); err != nil {
			return nil, nil, err
		}
		var got []string
		for {
			m := new(wrapperspb.StringValue)
			if err := st.RecvMsg(m); err == io.EOF {
				return got, st.Trailer(), nil
			} else if err != nil {
				return got, st.Trailer(), err
			}
			got = append(got, m.GetValue())
		}
	}
	got, tr, err := watch()
	if err != nil || len(got) != 3 || first(tr, "ratelimit") == "" {
		t.Fatalf("first stream: %v, %v, trailer %v", got, err, tr)
	}
	got, tr, err = watch()
	if status.Code(err) != codes.ResourceExhausted || len(got) != 0 {
		t.Fatalf("second stream: %v, %v; want RESOURCE_EXHAUSTED before any message", got, err)
	}
	if _, ok := retryInfo(err); !ok || !strings.HasPrefix(first(tr, "ratelimit"), `"watch";r=0`) {
		t.Errorf("second stream: RetryInfo %v, trailer %v", ok, tr)
	}
}

// TestClientStreamPerMessage: on a grpc_stream: per_message route, each
// message the client sends is decided as it is received: of 5 messages
// against a limit of 3, the handler receives 3 and the fourth ends the
// stream with RESOURCE_EXHAUSTED; another stream opens (nothing is
// charged when it opens) and its first message is refused.
func TestClientStreamPerMessage(t *testing.T) {
	t.Parallel()
	e, conn := start(t)
	upload := func(n int) (metadata.MD, error) {
		st, err := conn.NewStream(ctxWith(t), &grpc.StreamDesc{ClientStreams: true}, "/test.Echo/Upload")
		if err != nil {
			return nil, err
		}
		for i := range n {
			if err := st.SendMsg(wrapperspb.String(fmt.Sprint(i))); err != nil {
				break // the server ended the stream: RecvMsg tells why
			}
		}
		_ = st.CloseSend()
		err = st.RecvMsg(new(wrapperspb.StringValue))
		return st.Trailer(), err
	}
	tr, err := upload(5)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("5 messages against 3: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, ok := retryInfo(err); !ok || !strings.HasPrefix(first(tr, "ratelimit"), `"upload";r=0`) {
		t.Errorf("refusal: RetryInfo %v, trailer %v", ok, tr)
	}
	if n := e.received.Load(); n != 3 {
		t.Errorf("the handler received %d messages, want 3", n)
	}
	if _, err := upload(1); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a new stream's first message: %v, want RESOURCE_EXHAUSTED", err)
	}
	if tr, err := upload(0); err != nil || len(tr.Get("ratelimit")) != 0 {
		t.Errorf("a stream with no message: %v, trailer %v; want it to pass, charged nothing", err, tr)
	}
}

// TestCountOnByCode: a limit that counts only 404 answers (count_on)
// sees NOT_FOUND as 404: an OK call is not counted, a NOT_FOUND one is,
// and the next call is refused.
func TestCountOnByCode(t *testing.T) {
	t.Parallel()
	e, conn := start(t)
	ctx := ctxWith(t)
	if _, _, err := say(ctx, conn, "Find", "known"); err != nil {
		t.Fatalf("found: %v", err)
	}
	if _, _, err := say(ctx, conn, "Find", "known"); err != nil {
		t.Fatalf("found again (OK is not counted): %v", err)
	}
	if _, _, err := say(ctx, conn, "Find", "missing"); status.Code(err) != codes.NotFound {
		t.Fatalf("missing: %v", err)
	}
	if _, _, err := say(ctx, conn, "Find", "known"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("after a NOT_FOUND: %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := e.calls.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3", n)
	}
}

// TestActualCostFromTrailer: a limit whose cost the answer tells reads
// it from the metadata the handler sets.
func TestActualCostFromTrailer(t *testing.T) {
	t.Parallel()
	_, conn := start(t)
	ctx := ctxWith(t)
	if _, _, err := say(ctx, conn, "Spend", "7"); err != nil {
		t.Fatal(err)
	}
	// 10 an hour, 7 spent: the next call's estimate of 1 leaves 2.
	_, tr, err := say(ctx, conn, "Spend", "1")
	if err != nil || !strings.HasPrefix(first(tr, "ratelimit"), `"spend";r=2;`) {
		t.Errorf("after spending 7 of 10: %v, trailer %v; want r=2", err, tr)
	}
}

// TestStreamHoldsItsLease: a concurrency limit of 1 counts open streams:
// while one is open another is refused, and once it ended the next one
// passes.
func TestStreamHoldsItsLease(t *testing.T) {
	t.Parallel()
	e, conn := start(t)
	open := func(ctx context.Context) (grpc.ClientStream, error) {
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Echo/Hold")
		if err != nil {
			return nil, err
		}
		if err := st.SendMsg(wrapperspb.String("x")); err != nil {
			return nil, err
		}
		_ = st.CloseSend()
		return st, st.RecvMsg(new(wrapperspb.StringValue))
	}
	first, err := open(ctxWith(t))
	if err != nil {
		t.Fatal(err)
	}
	<-e.held
	if _, err := open(ctxWith(t)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second stream while the first is open: %v, want RESOURCE_EXHAUSTED", err)
	}
	close(e.release)
	if err := first.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("the first stream's end: %v", err)
	}
	if _, err := open(ctxWith(t)); err != nil {
		t.Errorf("after the first ended: %v", err)
	}
}

// TestRetryInfoHonouredByTheClient: client.RetryInterceptor, refused with
// the RetryInfo of a limit of 10 a second (a burst of 1), waits that
// long and calls again: every call succeeds, and each retry came at least
// the RetryInfo's wait after its refusal.
func TestRetryInfoHonouredByTheClient(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var waits []time.Duration
	var refusals []error
	ri := &client.RetryInterceptor{OnRetry: func(_ int, err error, wait time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		waits, refusals = append(waits, wait), append(refusals, err)
	}}
	e, conn := start(t, grpc.WithUnaryInterceptor(ri.Unary), grpc.WithStreamInterceptor(ri.Stream))
	ctx := ctxWith(t, "x-client", "c1")
	for i := range 3 {
		if out, _, err := say(ctx, conn, "Fast", "hi"); err != nil || out != "ok hi" {
			t.Fatalf("call %d: %q, %v", i+1, out, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) == 0 {
		t.Fatal("three calls at once against a burst of 1: no retry")
	}
	for i, err := range refusals {
		d, ok := retryInfo(err)
		if status.Code(err) != codes.ResourceExhausted || !ok || d <= 0 || d > 100*time.Millisecond {
			t.Errorf("refusal %d: %v, RetryInfo %v, want at most the 100ms a unit takes", i+1, err, d)
		}
		if waits[i] < d {
			t.Errorf("retry %d waited %v, less than the RetryInfo's %v", i+1, waits[i], d)
		}
	}
	if n := e.calls.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3", n)
	}
}

// TestHTTPStatus: the codes count_on sees are the HTTP statuses
// google.rpc.Code documents.
func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	for c, want := range map[codes.Code]int{codes.OK: 200, codes.Canceled: 499, codes.Unknown: 500, codes.InvalidArgument: 400,
		codes.DeadlineExceeded: 504, codes.NotFound: 404, codes.AlreadyExists: 409, codes.PermissionDenied: 403,
		codes.ResourceExhausted: 429, codes.FailedPrecondition: 400, codes.Aborted: 409, codes.OutOfRange: 400,
		codes.Unimplemented: 501, codes.Internal: 500, codes.Unavailable: 503, codes.DataLoss: 500, codes.Unauthenticated: 401} {
		if got := grpcguard.HTTPStatus(c); got != want {
			t.Errorf("%v: %d, want %d", c, got, want)
		}
	}
}

// TestOverloadShedsUnavailable: a call over its route's overload cap is
// shed before its handler runs, UNAVAILABLE with a RetryInfo of the
// Retry-After.
func TestOverloadShedsUnavailable(t *testing.T) {
	t.Parallel()
	_, conn := start(t)
	b := &struct{ in, out chan struct{} }{make(chan struct{}, 4), make(chan struct{})}
	busy.Store(b)
	busyIn, busyOut := b.in, b.out
	done := make(chan error, 1)
	go func() {
		_, _, err := say(ctxWith(t), conn, "Busy", "first")
		done <- err
	}()
	<-busyIn
	_, _, err := say(ctxWith(t), conn, "Busy", "second")
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a call over the cap: %v, want UNAVAILABLE", err)
	}
	if d, ok := retryInfo(err); !ok || d != time.Second {
		t.Errorf("RetryInfo %v %v, want 1s", d, ok)
	}
	close(busyOut)
	if err := <-done; err != nil {
		t.Errorf("the first call: %v", err)
	}
	select {
	case <-busyIn:
		t.Error("the shed call reached its handler")
	default:
	}
}
