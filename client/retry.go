package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// RetryTransport is an http.RoundTripper that retries requests answered
// with 429 Too Many Requests or 503 Service Unavailable.
//
// Before each new attempt it waits for the server's Retry-After (either
// delay-seconds or an HTTP-date) plus a jitter of up to a tenth of it, at
// least BaseDelay, so that clients refused together do not all come back
// at the same instant; without a
// Retry-After it waits a random time between 0 and
// min(MaxDelay, BaseDelay·2^retry) ("full jitter"). It gives up and
// returns the last answer after MaxAttempts attempts, or at once when the
// server asks for a wait longer than MaxRetryAfter or when the next
// attempt would come after the request's deadline. A request with a body
// is retried only when the body can be produced again (Request.GetBody is
// set, as http.NewRequest does for in-memory bodies). Bodies of answers it
// discards are drained a little and closed so the connection can be
// reused, and a request body it does not send is closed, as a
// RoundTripper must. The request's context bounds every wait.
//
// Three optional parts guard the server, and every attempt goes through
// them: a Pacer holds attempts back while the server has said that
// nothing is left (its RateLimit fields, a Retry-After), an
// AdaptiveThrottle rejects attempts locally as the server refuses more of
// them, and a RetryBudget keeps retries within a share of requests. Share
// each of them between the transports that call the same servers.
//
// The zero value is usable and retries over http.DefaultTransport.
type RetryTransport struct {
	// Base sends each attempt; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts bounds the number of attempts, the first included.
	// Zero means 4.
	MaxAttempts int
	// BaseDelay is the first backoff step. Zero means 100ms.
	BaseDelay time.Duration
	// MaxDelay caps the exponential backoff. Zero means 10s.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After honoured by waiting; a
	// longer one is returned to the caller at once. Zero means 60s.
	MaxRetryAfter time.Duration
	// Now returns the current time, used to turn an HTTP-date Retry-After
	// into a wait; nil means time.Now.
	Now func() time.Time
	// OnRetry, when set, is called before each wait with the attempt that
	// was just answered (1 for the first) and the wait chosen.
	OnRetry func(attempt int, resp *http.Response, wait time.Duration)

	// Pacer, when set, holds each attempt back before it is sent while
	// the server has said that nothing is left, and learns from every
	// answer; an attempt it does not send fails with a *HoldError.
	Pacer *Pacer
	// PaceKey names the quota a request draws on in Pacer; nil means the
	// request's host (URL.Host).
	PaceKey func(*http.Request) string
	// Throttle, when set, rejects attempts locally with ErrThrottled as
	// the server refuses more of them. A 429 or 503 is a refusal, and so
	// is an attempt that ends without an answer; every other answer is
	// accepted.
	Throttle *AdaptiveThrottle
	// Budget, when set, bounds retries to a share of requests; when it
	// refuses a retry, the caller gets the last answer.
	Budget *RetryBudget
}

// RoundTrip sends req, retrying as described on RetryTransport.
func (t *RetryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	attempts := t.MaxAttempts
	if attempts <= 0 {
		attempts = 4
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	ctx := req.Context()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	if t.Budget != nil {
		t.Budget.Request(time.Now())
	}
	for attempt := 1; ; attempt++ {
		resp, err := t.attempt(base, req)
		if err != nil || !retryable(resp.StatusCode) || attempt >= attempts || !replayable {
			return resp, err
		}
		wait, ok := t.delay(resp, attempt-1)
		if !ok {
			return resp, nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			// Waiting would only end in the deadline: the caller gets the
			// server's answer now.
			return resp, nil
		}
		// Prepare the next request before throwing this answer away, so a
		// body that cannot be produced again leaves the caller this one.
		next := req
		if req.Body != nil && req.Body != http.NoBody {
			body, berr := req.GetBody()
			if berr != nil {
				return resp, nil
			}
			next = req.Clone(ctx)
			next.Body = body
		}
		bucket, ok := t.Budget.take(time.Now())
		if !ok {
			closeBody(next, req)
			return resp, nil
		}
		if t.OnRetry != nil {
			t.OnRetry(attempt, resp, wait)
		}
		stop := drain(resp)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			stop()
			closeBody(next, req)
			t.Budget.giveBack(bucket) // never sent
			return nil, ctx.Err()
		case <-timer.C:
		}
		stop()
		req = next
	}
}

// attempt sends req once through the Pacer and the Throttle, when they
// are set, and tells them the answer.
func (t *RetryTransport) attempt(base http.RoundTripper, req *http.Request) (*http.Response, error) {
	var tk *ticket
	if t.Pacer != nil {
		key := req.URL.Host
		if t.PaceKey != nil {
			key = t.PaceKey(req)
		}
		var err error
		if tk, err = t.Pacer.acquire(req.Context(), key, t.Pacer.class(req.Method+" "+req.URL.Path)); err != nil {
			closeBody(req, nil)
			return nil, err
		}
	}
	if t.Throttle != nil && !t.Throttle.Allow(time.Now()) {
		if tk != nil {
			tk.finish(time.Now(), nil)
		}
		closeBody(req, nil)
		return nil, fmt.Errorf("%w (%s)", ErrThrottled, req.URL.Host)
	}
	resp, err := base.RoundTrip(req)
	if tk != nil {
		var a *answerFields
		if err == nil {
			a = httpAnswer(resp, t.now())
		}
		tk.finish(time.Now(), a)
	}
	if t.Throttle != nil {
		switch {
		case err == nil && !retryable(resp.StatusCode):
			t.Throttle.Accepted(time.Now())
		case err != nil && callerLeft(req.Context()):
			// Cancelled by its own caller: the backend refused nothing,
			// and callers that give up must not make the throttle reject
			// the requests of those that stay.
		default:
			t.Throttle.Refused(time.Now())
		}
	}
	return resp, err
}

// callerLeft reports whether the caller cancelled ctx itself (its deadline
// passing is not leaving: a backend too slow for it counts as refusing).
func callerLeft(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// httpAnswer reads what a Pacer learns from an answer: the RateLimit
// fields (unless the answer comes from a cache, Age > 0) and, on a 429 or
// 503, the Retry-After.
func httpAnswer(resp *http.Response, now time.Time) *answerFields {
	a := &answerFields{refused: retryable(resp.StatusCode)}
	if a.refused {
		a.retryAfter, a.hasRetry = ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	}
	if age := strings.TrimSpace(resp.Header.Get("Age")); age == "" || strings.Trim(age, "0") == "" {
		a.quotas = parseQuotas(resp.Header.Values("RateLimit"), resp.Header.Values("RateLimit-Policy"), maxPolicies)
	}
	return a
}

// now returns the transport's clock reading.
func (t *RetryTransport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// retryable reports the statuses RetryTransport retries.
func retryable(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// delay chooses the wait before the next attempt after retry earlier
// retries, and reports false when the server asks for more than the
// caller is willing to wait.
func (t *RetryTransport) delay(resp *http.Response, retry int) (time.Duration, bool) {
	baseDelay := t.BaseDelay
	if baseDelay <= 0 {
		baseDelay = 100 * time.Millisecond
	}
	maxDelay := t.MaxDelay
	if maxDelay <= 0 {
		maxDelay = 10 * time.Second
	}
	maxRA := t.MaxRetryAfter
	if maxRA <= 0 {
		maxRA = 60 * time.Second
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	if ra, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), now()); ok {
		if ra > maxRA {
			return 0, false
		}
		// A tenth of the wait, as Wait and RetryInterceptor draw, so that
		// clients refused together at a window's end come back spread.
		return addSat(ra, rand.N(max(baseDelay, ra/10))), true
	}
	step := maxDelay
	if retry < 62 && baseDelay<<retry > 0 && baseDelay<<retry < maxDelay {
		step = baseDelay << retry
	}
	return rand.N(step) + 1, true
}

// maxDuration is the longest time.Duration.
const maxDuration = time.Duration(1<<63 - 1)

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP-date
// (IMF-fixdate or one of the two obsolete forms), relative to now. A date
// in the past gives 0; a delay or a date too far away for a Duration
// gives the longest Duration, since the server asked for a long wait (as
// RFC 9111 reads a delta-seconds past what can be represented). It
// reports false for an empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		const maxSeconds = int64(maxDuration / time.Second)
		n := int64(0)
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			if n <= maxSeconds {
				n = n*10 + int64(c-'0')
			}
		}
		if n > maxSeconds {
			return maxDuration, true
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := at.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// addSat returns a+b for non-negative a and b, or the longest Duration
// when the sum does not fit.
func addSat(a, b time.Duration) time.Duration {
	if a > maxDuration-b {
		return maxDuration
	}
	return a + b
}

// closeBody closes the body of a request that will not be sent, unless
// it is the body of sent, which the transport that sent it closed.
func closeBody(req, sent *http.Request) {
	if req == nil || req.Body == nil || req.Body == http.NoBody {
		return
	}
	if sent != nil && req.Body == sent.Body {
		return
	}
	_ = req.Body.Close()
}

// drain reads a little of an unwanted answer and closes it, so that the
// connection can carry the next attempt, while the transport waits. The
// function it returns ends the drain: it closes the body, cutting a read
// that has stalled (the connection is then not reused), and returns when
// the drain has stopped.
func drain(resp *http.Response) (stop func()) {
	if resp == nil || resp.Body == nil {
		return func() {}
	}
	var once sync.Once
	closeOnce := func() { once.Do(func() { _ = resp.Body.Close() }) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		closeOnce()
	}()
	return func() {
		select {
		case <-done:
		default:
			closeOnce()
			<-done
		}
	}
}
