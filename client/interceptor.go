package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RetryInterceptor is a gRPC client interceptor for unary and streaming
// calls: the gRPC side of RetryTransport. Install both of its methods:
//
//	conn, err := grpc.NewClient(target, creds,
//		grpc.WithUnaryInterceptor(ri.Unary), grpc.WithStreamInterceptor(ri.Stream))
//
// It retries a unary call refused with RESOURCE_EXHAUSTED or UNAVAILABLE
// when the server says when to come back, with a google.rpc.RetryInfo
// detail (or a retry-after metadata entry in delay-seconds): it waits
// that delay plus up to Jitter, a bounded number of times. It gives up
// and returns the server's error at once when the delay is longer than
// MaxRetryAfter or ends after the call's deadline. A refusal without a
// delay is returned as it is: the server has not said that waiting helps.
// Streams are never retried.
//
// Like RetryTransport it takes an optional Pacer, AdaptiveThrottle and
// RetryBudget; they see every call and every attempt. The Pacer reads
// the ratelimit and ratelimit-policy metadata (trailers, or headers when
// there are no trailers) with the syntax of the HTTP fields, and the
// RetryInfo. A call they do not send fails with a status error whose code
// is DEADLINE_EXCEEDED (the quota is back only after the call's
// deadline), CANCELED, RESOURCE_EXHAUSTED (longer than the Pacer's
// MaxHold) or UNAVAILABLE (ErrThrottled); errors.As still finds the
// *HoldError, and errors.Is ErrThrottled.
//
// The zero value is usable: it retries and does nothing else.
type RetryInterceptor struct {
	// MaxAttempts bounds the attempts of a unary call, the first
	// included. Zero means 4; 1 means no retry.
	MaxAttempts int
	// MaxRetryAfter is the longest delay honoured by waiting; a longer one
	// returns the server's error at once. Zero means 60s.
	MaxRetryAfter time.Duration
	// Jitter is the largest extra wait added to each delay, drawn
	// uniformly. Zero means 10% of the delay, at least 5ms.
	Jitter time.Duration
	// OnRetry, when set, is called before each wait with the attempt that
	// was just refused (1 for the first), its error and the wait chosen.
	OnRetry func(attempt int, err error, wait time.Duration)

	// Pacer, when set, holds calls back before they are sent while the
	// server has said that nothing is left, and learns from every answer.
	Pacer *Pacer
	// PaceKey names the quota a call draws on in Pacer; nil means the
	// connection's target (ClientConn.Target).
	PaceKey func(cc *grpc.ClientConn, method string) string
	// Throttle, when set, rejects calls locally as the server refuses
	// more of them. RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED and
	// CANCELED are not accepted; every other answer is.
	Throttle *AdaptiveThrottle
	// Budget, when set, bounds retries to a share of calls; when it
	// refuses a retry, the caller gets the last error.
	Budget *RetryBudget
}

// Unary is a grpc.UnaryClientInterceptor.
func (ri *RetryInterceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	attempts := ri.MaxAttempts
	if attempts <= 0 {
		attempts = 4
	}
	maxRA := ri.MaxRetryAfter
	if maxRA <= 0 {
		maxRA = 60 * time.Second
	}
	key := ri.key(cc, method)
	if ri.Budget != nil {
		ri.Budget.Request(time.Now())
	}
	callOpts := make([]grpc.CallOption, len(opts), len(opts)+2)
	copy(callOpts, opts)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		tk, err := ri.before(ctx, key, method)
		if err != nil {
			return err
		}
		var header, trailer metadata.MD
		err = invoker(ctx, method, req, reply, cc, append(callOpts, grpc.Header(&header), grpc.Trailer(&trailer))...)
		a := grpcAnswer(err, header, trailer)
		ri.after(ctx, tk, a, err)
		if err == nil || !a.refused || !a.hasRetry || attempt >= attempts || a.retryAfter > maxRA {
			return err
		}
		wait := addSat(a.retryAfter, jitter(a.retryAfter, ri.Jitter))
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return err
		}
		bucket, ok := ri.Budget.take(time.Now())
		if !ok {
			return err
		}
		if ri.OnRetry != nil {
			ri.OnRetry(attempt, err, wait)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			ri.Budget.giveBack(bucket) // never sent
			return status.FromContextError(ctx.Err()).Err()
		case <-timer.C:
		}
	}
}

// Stream is a grpc.StreamClientInterceptor. The stream is paced and
// throttled when it opens, and its end (its status, headers and
// trailers) is what the Pacer and the throttle learn from.
func (ri *RetryInterceptor) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	tk, err := ri.before(ctx, ri.key(cc, method), method)
	if err != nil {
		return nil, err
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		ri.after(ctx, tk, grpcAnswer(err, nil, nil), err)
		return nil, err
	}
	s := &pacedStream{ClientStream: cs, ctx: ctx, ri: ri, tk: tk, unary: !desc.ServerStreams}
	if tk != nil {
		// However the stream ends (even abandoned with its connection
		// closed), its flight ends; the answer, when read, still counts.
		s.stop = context.AfterFunc(cs.Context(), func() { tk.finish(time.Now(), nil) })
	}
	return s, nil
}

// key returns the Pacer key of a call.
func (ri *RetryInterceptor) key(cc *grpc.ClientConn, method string) string {
	if ri.PaceKey != nil {
		return ri.PaceKey(cc, method)
	}
	if cc == nil {
		return ""
	}
	return cc.Target()
}

// before passes a call through the Pacer and the throttle.
func (ri *RetryInterceptor) before(ctx context.Context, key, method string) (*ticket, error) {
	var tk *ticket
	if ri.Pacer != nil {
		var err error
		if tk, err = ri.Pacer.acquire(ctx, key, ri.Pacer.class(method)); err != nil {
			code := codes.ResourceExhausted
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				code = codes.DeadlineExceeded
			case errors.Is(err, context.Canceled):
				code = codes.Canceled
			}
			return nil, &localError{code: code, err: err}
		}
	}
	if ri.Throttle != nil && !ri.Throttle.Allow(time.Now()) {
		if tk != nil {
			tk.finish(time.Now(), nil)
		}
		return nil, &localError{code: codes.Unavailable, err: fmt.Errorf("%w (%s)", ErrThrottled, key)}
	}
	return tk, nil
}

// after tells the Pacer and the throttle how a call ended. A call its
// own caller cancelled (ctx) tells the throttle nothing: the server
// refused nothing, and callers that give up must not make it reject the
// calls of those that stay.
func (ri *RetryInterceptor) after(ctx context.Context, tk *ticket, a *answerFields, err error) {
	if tk != nil {
		tk.finish(time.Now(), a)
	}
	if ri.Throttle != nil {
		switch {
		case grpcAccepted(err):
			ri.Throttle.Accepted(time.Now())
		case status.Code(err) == codes.Canceled && callerLeft(ctx):
		default:
			ri.Throttle.Refused(time.Now())
		}
	}
}

// grpcAccepted reports whether a call's outcome counts as accepted by
// the server for adaptive throttling.
func grpcAccepted(err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// grpcAnswer reads what a Pacer learns from a call's outcome and
// metadata.
func grpcAnswer(err error, header, trailer metadata.MD) *answerFields {
	st := status.Convert(err)
	a := &answerFields{refused: st.Code() == codes.ResourceExhausted || st.Code() == codes.Unavailable}
	md := trailer
	if len(md.Get("ratelimit")) == 0 {
		md = header
	}
	a.quotas = parseQuotas(md.Get("ratelimit"), md.Get("ratelimit-policy"), maxPolicies)
	if !a.refused {
		return a
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok && info.GetRetryDelay() != nil {
			delay := info.GetRetryDelay().AsDuration()
			a.retryAfter, a.hasRetry = min(max(delay, 0), maxFieldSeconds*time.Second), true
			return a
		}
	}
	for _, m := range []metadata.MD{trailer, header} {
		if v := m.Get("retry-after"); len(v) > 0 {
			if ra, ok := ParseRetryAfter(v[0], time.Now()); ok {
				a.retryAfter, a.hasRetry = ra, true
				return a
			}
		}
	}
	return a
}

// localError is a call that the interceptor did not send, as a gRPC
// status that still unwraps to its cause.
type localError struct {
	code codes.Code
	err  error
}

func (e *localError) Error() string { return e.err.Error() }

func (e *localError) Unwrap() error { return e.err }

// GRPCStatus lets status.Code and status.FromError see the code.
func (e *localError) GRPCStatus() *status.Status { return status.New(e.code, e.err.Error()) }

// pacedStream reports how a stream ended to its interceptor.
type pacedStream struct {
	grpc.ClientStream
	ctx context.Context // the caller's, of the stream
	ri  *RetryInterceptor
	tk  *ticket
	// unary is set for streams whose server sends one message: the
	// stream ends with that message.
	unary bool
	stop  func() bool
	once  sync.Once
}

func (s *pacedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF {
		s.end(err)
	}
	return err
}

func (s *pacedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err == io.EOF:
		s.end(nil)
	case err != nil:
		s.end(err)
	case s.unary:
		s.end(nil)
	}
	return err
}

// end takes in the stream's outcome, once.
func (s *pacedStream) end(err error) {
	s.once.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		header, _ := s.ClientStream.Header()
		s.ri.after(s.ctx, s.tk, grpcAnswer(err, header, s.ClientStream.Trailer()), err)
	})
}
