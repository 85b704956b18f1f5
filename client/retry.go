package client

import (
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryTransport is an http.RoundTripper that retries requests answered
// with 429 Too Many Requests or 503 Service Unavailable.
//
// Before each new attempt it waits for the server's Retry-After (either
// delay-seconds or an HTTP-date) plus up to BaseDelay of jitter; without a
// Retry-After it waits a random time between 0 and
// min(MaxDelay, BaseDelay·2^retry) ("full jitter"). It gives up and
// returns the last answer after MaxAttempts attempts, or at once when the
// server asks for a wait longer than MaxRetryAfter. A request with a body
// is retried only when the body can be produced again (Request.GetBody is
// set, as http.NewRequest does for in-memory bodies). Bodies of answers it
// discards are drained a little and closed so the connection can be
// reused. The request's context bounds every wait.
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
	for attempt := 1; ; attempt++ {
		resp, err := base.RoundTrip(req)
		if err != nil || !retryable(resp.StatusCode) || attempt >= attempts || !replayable {
			return resp, err
		}
		wait, ok := t.delay(resp, attempt-1)
		if !ok {
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
		if t.OnRetry != nil {
			t.OnRetry(attempt, resp, wait)
		}
		discard(resp)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
		req = next
	}
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
		return ra + rand.N(baseDelay), true
	}
	step := maxDelay
	if retry < 62 && baseDelay<<retry > 0 && baseDelay<<retry < maxDelay {
		step = baseDelay << retry
	}
	return rand.N(step) + 1, true
}

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP-date
// (IMF-fixdate or one of the two obsolete forms), relative to now. A date
// in the past gives 0. It reports false for an empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false
			}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(1<<63-1)/int64(time.Second) {
			return 0, false
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

// discard drains a little of an unwanted answer and closes it, so the
// connection can carry the next attempt.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	_ = resp.Body.Close()
}
