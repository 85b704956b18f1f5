package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/client"
)

// outcome is how the test service ends one call: its error (nil for OK)
// and the trailing metadata it sets.
type outcome struct {
	err     error
	trailer metadata.MD
}

// quotaService is a real gRPC service with a unary method (Call), a
// server stream (Watch) and a client stream (Upload); next decides each
// call's outcome from the number of calls so far, and it records when
// each call arrived.
type quotaService struct {
	next func(n int, method string) outcome

	mu      sync.Mutex
	arrived []time.Time
	methods []string
}

func (s *quotaService) arrive(method string) outcome {
	s.mu.Lock()
	s.arrived = append(s.arrived, time.Now())
	s.methods = append(s.methods, method)
	n := len(s.arrived)
	s.mu.Unlock()
	return s.next(n, method)
}

func (s *quotaService) calls() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrived...)
}

var quotaDesc = grpc.ServiceDesc{
	ServiceName: "floodgate.test.Quota",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			o := srv.(*quotaService).arrive("Call")
			if o.trailer != nil {
				_ = grpc.SetTrailer(ctx, o.trailer)
			}
			if o.err != nil {
				return nil, o.err
			}
			return wrapperspb.String("ok " + in.GetValue()), nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := st.RecvMsg(in); err != nil {
				return err
			}
			o := srv.(*quotaService).arrive("Watch")
			if err := st.SendMsg(wrapperspb.String("first")); err != nil {
				return err
			}
			st.SetTrailer(o.trailer)
			return o.err
		},
	}, {
		StreamName:    "Upload",
		ClientStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			for {
				in := new(wrapperspb.StringValue)
				if err := st.RecvMsg(in); err == io.EOF {
					break
				} else if err != nil {
					return err
				}
			}
			o := srv.(*quotaService).arrive("Upload")
			st.SetTrailer(o.trailer)
			if o.err != nil {
				return o.err
			}
			return st.SendMsg(wrapperspb.String("stored"))
		},
	}},
}

// startQuota serves svc on a loopback port and returns a connection to it
// through ri's interceptors.
func startQuota(t *testing.T, svc *quotaService, ri *client.RetryInterceptor) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&quotaDesc, svc)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(ri.Unary), grpc.WithStreamInterceptor(ri.Stream))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

// exhausted is a RESOURCE_EXHAUSTED with a RetryInfo of delay.
func exhausted(t *testing.T, delay time.Duration) error {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "Too Many Requests").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func rl(value, policy string) metadata.MD {
	return metadata.Pairs("ratelimit", value, "ratelimit-policy", policy)
}

func call(ctx context.Context, conn *grpc.ClientConn, v string) error {
	return conn.Invoke(ctx, "/floodgate.test.Quota/Call", wrapperspb.String(v), new(wrapperspb.StringValue))
}

// TestRetryInterceptorHonoursRetryInfo: a call refused with
// RESOURCE_EXHAUSTED, a RetryInfo of 300ms and the RateLimit fields as
// trailing metadata is retried after the delay; meanwhile another call on
// the connection waits for the delay too, and one whose deadline comes
// first fails at once without reaching the server.
func TestRetryInterceptorHonoursRetryInfo(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	svc := &quotaService{next: func(n int, _ string) outcome {
		if n == 1 {
			return outcome{err: exhausted(t, delay), trailer: rl(`"rpc";r=0;t=0`, `"rpc";q=10;w=1`)}
		}
		return outcome{trailer: rl(`"rpc";r=5;t=1`, `"rpc";q=10;w=1`)}
	}}
	pacer := client.NewPacer(client.PacerOptions{})
	var conn *grpc.ClientConn
	var wg sync.WaitGroup
	var otherErr, shortErr error
	var waits []time.Duration
	ri := &client.RetryInterceptor{Pacer: pacer, OnRetry: func(attempt int, err error, wait time.Duration) {
		waits = append(waits, wait)
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("OnRetry with %v", err)
		}
		// While the first call waits: another call, and one with a
		// deadline shorter than the delay.
		wg.Go(func() { otherErr = call(context.Background(), conn, "other") })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		shortErr = call(ctx, conn, "short")
	}}
	conn = startQuota(t, svc, ri)
	if err := call(context.Background(), conn, "first"); err != nil {
		t.Fatalf("first call: %v, want OK after a retry", err)
	}
	wg.Wait()
	if otherErr != nil {
		t.Fatalf("the other call: %v", otherErr)
	}
	if len(waits) != 1 || waits[0] < delay {
		t.Fatalf("waits %v, want one of at least %s", waits, delay)
	}
	var he *client.HoldError
	if status.Code(shortErr) != codes.DeadlineExceeded || !errors.As(shortErr, &he) || he.Wait <= 50*time.Millisecond {
		t.Fatalf("the short call: %v, want DEADLINE_EXCEEDED from a *HoldError waiting more than its 50ms", shortErr)
	}
	calls := svc.calls()
	if len(calls) != 3 {
		t.Fatalf("the server saw %d calls, want 3 (the short one never sent)", len(calls))
	}
	for i, c := range calls[1:] {
		if gap := c.Sub(calls[0]); gap < delay {
			t.Errorf("call %d reached the server %s after the refusal, want at least the RetryInfo's %s", i+2, gap, delay)
		}
	}
	if s := pacer.Stats(); s.Refused != 1 || s.Held < 1 {
		t.Errorf("stats %+v, want 1 refused and the other call held", s)
	}
}

// TestRetryInterceptorGivesUpOnLongRetryInfo: a delay past MaxRetryAfter
// returns the server's error at once, and the Pacer then refuses the
// next call locally (the delay is past its MaxHold too).
func TestRetryInterceptorGivesUpOnLongRetryInfo(t *testing.T) {
	t.Parallel()
	svc := &quotaService{next: func(int, string) outcome { return outcome{err: exhausted(t, 2*time.Minute)} }}
	ri := &client.RetryInterceptor{Pacer: client.NewPacer(client.PacerOptions{})}
	conn := startQuota(t, svc, ri)
	err := call(context.Background(), conn, "a")
	if status.Code(err) != codes.ResourceExhausted || errors.Is(err, client.ErrHeldBack) {
		t.Fatalf("first call: %v, want the server's RESOURCE_EXHAUSTED", err)
	}
	err = call(context.Background(), conn, "b")
	var he *client.HoldError
	if status.Code(err) != codes.ResourceExhausted || !errors.As(err, &he) || he.Cause != nil {
		t.Fatalf("second call: %v, want RESOURCE_EXHAUSTED from a *HoldError past MaxHold", err)
	}
	if n := len(svc.calls()); n != 1 {
		t.Fatalf("the server saw %d calls, want 1", n)
	}
}

// TestRetryInterceptorPacesStreams: a server stream that ends with
// RESOURCE_EXHAUSTED and a used-up policy in its trailers, and a client
// stream that ends OK with one, hold the next stream back until the
// reset (1s): with a shorter deadline it fails at once, without one it
// reaches the server a second later.
func TestRetryInterceptorPacesStreams(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"Watch", "Upload"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			svc := &quotaService{next: func(n int, _ string) outcome {
				if n == 1 {
					o := outcome{trailer: rl(`"streams";r=0;t=1`, `"streams";q=1;w=1`)}
					if method == "Watch" {
						o.err = status.Error(codes.ResourceExhausted, "Too Many Requests")
					}
					return o
				}
				return outcome{trailer: rl(`"streams";r=0;t=1`, `"streams";q=1;w=1`)}
			}}
			ri := &client.RetryInterceptor{Pacer: client.NewPacer(client.PacerOptions{})}
			conn := startQuota(t, svc, ri)
			desc := &grpc.StreamDesc{StreamName: method, ServerStreams: method == "Watch", ClientStreams: method == "Upload"}
			run := func(ctx context.Context) error {
				st, err := conn.NewStream(ctx, desc, "/floodgate.test.Quota/"+method)
				if err != nil {
					return err
				}
				if err := st.SendMsg(wrapperspb.String("x")); err != nil {
					return err
				}
				if err := st.CloseSend(); err != nil {
					return err
				}
				for {
					if err := st.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
						return nil
					} else if err != nil {
						return err
					}
					if method == "Upload" {
						return nil // one answer ends a client stream
					}
				}
			}
			err := run(context.Background())
			if method == "Watch" && status.Code(err) != codes.ResourceExhausted || method == "Upload" && err != nil {
				t.Fatalf("first stream: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err = run(ctx)
			var he *client.HoldError
			if status.Code(err) != codes.DeadlineExceeded || !errors.As(err, &he) || he.Policy != "streams" {
				t.Fatalf("second stream: %v, want DEADLINE_EXCEEDED from a *HoldError for policy streams", err)
			}
			if err := run(context.Background()); err != nil {
				t.Fatalf("third stream: %v", err)
			}
			calls := svc.calls()
			if len(calls) != 2 || calls[1].Sub(calls[0]) < time.Second {
				t.Fatalf("the server saw streams at %v, want 2, the second a second or more after the first", calls)
			}
		})
	}
}

// TestRetryInterceptorThrottlesAndBudgets: against a server that refuses
// every call with a RetryInfo of 1ms, 100 calls of up to 4 attempts send
// at most 100 + 10% + 2 attempts with a RetryBudget; and with an
// AdaptiveThrottle as well, calls start failing locally.
func TestRetryInterceptorThrottlesAndBudgets(t *testing.T) {
	t.Parallel()
	svc := &quotaService{next: func(int, string) outcome { return outcome{err: exhausted(t, time.Millisecond)} }}
	budget := client.NewRetryBudget(client.RetryBudgetOptions{Ratio: 0.1, MinRetries: 2})
	ri := &client.RetryInterceptor{Budget: budget, Jitter: time.Millisecond}
	conn := startQuota(t, svc, ri)
	for range 100 {
		if err := call(context.Background(), conn, "x"); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call: %v, want RESOURCE_EXHAUSTED", err)
		}
	}
	if n := len(svc.calls()); n > 112 || budget.Denied() == 0 {
		t.Fatalf("the server saw %d attempts for 100 calls with %d retries denied, want at most 112", n, budget.Denied())
	}

	th := client.NewAdaptiveThrottle(client.AdaptiveThrottleOptions{})
	ri.Throttle = th
	var local int
	for range 100 {
		err := call(context.Background(), conn, "y")
		if errors.Is(err, client.ErrThrottled) {
			local++
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("a throttled call: %v, want UNAVAILABLE", err)
			}
		}
	}
	if local == 0 || th.Rejected() != int64(local) {
		t.Fatalf("%d calls failed locally, the throttle counted %d; want some, the same", local, th.Rejected())
	}
}

// TestRetryInterceptorLongStreamHoldsNoCallPastMaxHold: the server says
// one unit is left (no ratelimit-policy), and a server stream that takes
// it stays open, its client reading on. A unary call without a deadline,
// held for that stream's answer, fails once the Pacer's MaxHold has
// passed (RESOURCE_EXHAUSTED, a *HoldError), unsent, instead of waiting
// as long as the stream lives.
func TestRetryInterceptorLongStreamHoldsNoCallPastMaxHold(t *testing.T) {
	t.Parallel()
	svc := &quotaService{next: func(int, string) outcome {
		return outcome{trailer: metadata.Pairs("ratelimit", `"api";r=1;t=1`)}
	}}
	const maxHold = 300 * time.Millisecond
	ri := &client.RetryInterceptor{Pacer: client.NewPacer(client.PacerOptions{MaxHold: maxHold}), MaxAttempts: 1}
	conn := startQuota(t, svc, ri)
	if err := call(context.Background(), conn, "first"); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	st, err := conn.NewStream(sctx, &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}, "/floodgate.test.Quota/Watch")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	// The stream is open, its client still reading: its answer (the
	// trailer) is not read yet.
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- call(context.Background(), conn, "held") }()
	select {
	case err := <-done:
		var he *client.HoldError
		if status.Code(err) != codes.ResourceExhausted || !errors.As(err, &he) {
			t.Fatalf("the held call: %v, want RESOURCE_EXHAUSTED from a *HoldError", err)
		}
		if el := time.Since(start); el < maxHold {
			t.Errorf("failed after %s, before MaxHold (%s)", el, maxHold)
		}
	case <-time.After(maxHold + 3*time.Second):
		scancel()
		err := <-done
		t.Fatalf("a call without a deadline was still held %s after MaxHold (%s) by an open stream; "+
			"it ended (%v) only once the stream did", 3*time.Second, maxHold, err)
	}
	if n := len(svc.calls()); n != 2 {
		t.Errorf("the server saw %d calls, want 2: the held one is never sent", n)
	}
}

// TestRetryInterceptorEndsATargetWideHoldOneCallAtATime: a call refused
// with a RetryInfo and no RateLimit metadata holds back every call to the
// target; when the delay ends, one call goes to find out and the others
// wait for its answer, then go.
func TestRetryInterceptorEndsATargetWideHoldOneCallAtATime(t *testing.T) {
	t.Parallel()
	probe, answer := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(answer) }) }
	svc := &quotaService{next: func(n int, _ string) outcome {
		switch n {
		case 1:
			return outcome{err: exhausted(t, time.Second)}
		case 2:
			close(probe)
			<-answer
		}
		return outcome{}
	}}
	ri := &client.RetryInterceptor{MaxAttempts: 1, Pacer: client.NewPacer(client.PacerOptions{})}
	conn := startQuota(t, svc, ri)
	t.Cleanup(release) // runs before startQuota's cleanup stops the server
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := call(ctx, conn, "first"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first call: %v, want RESOURCE_EXHAUSTED", err)
	}
	const held = 8
	var wg sync.WaitGroup
	for range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := call(ctx, conn, "held"); err != nil {
				t.Errorf("held call: %v", err)
			}
		}()
	}
	select {
	case <-probe:
	case <-ctx.Done():
		t.Fatal("no call reached the server after the RetryInfo's delay")
	}
	time.Sleep(300 * time.Millisecond) // every chance for the others to go: none may
	during := len(svc.calls()) - 1
	release()
	wg.Wait()
	if during != 1 {
		t.Errorf("%d calls reached the server together when the delay ended, want 1 until it was answered", during)
	}
	if n := len(svc.calls()); n != held+1 {
		t.Errorf("the server saw %d calls, want %d", n, held+1)
	}
}

// TestRetryInterceptorBudgetNotSpentByCallersWhoLeft: as the transport's
// test: a budget of two retries, two callers who leave while they wait
// 5 s to retry, and a third caller who is still allowed its retry.
func TestRetryInterceptorBudgetNotSpentByCallersWhoLeft(t *testing.T) {
	t.Parallel()
	svc := &quotaService{next: func(n int, _ string) outcome {
		switch n {
		case 1, 2:
			return outcome{err: exhausted(t, 5*time.Second)}
		case 3:
			return outcome{err: exhausted(t, time.Millisecond)}
		}
		return outcome{}
	}}
	budget := client.NewRetryBudget(client.RetryBudgetOptions{Ratio: -1, MinRetries: 2})
	conn := startQuota(t, svc, &client.RetryInterceptor{Budget: budget, MaxAttempts: 2})
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		if err := call(ctx, conn, "x"); status.Code(err) != codes.Canceled {
			t.Fatalf("a caller who left: %v, want CANCELLED", err)
		}
	}
	if err := call(context.Background(), conn, "x"); err != nil || budget.Denied() != 0 {
		t.Fatalf("the third call: %v with %d retries denied; want its retry's answer, none denied", err, budget.Denied())
	}
}
