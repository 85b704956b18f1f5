package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Hit is one limit applied to one key, as the HTTP check API takes it.
type Hit struct {
	// Limit names a limit known to the service.
	Limit string `json:"limit"`
	// Key is the subject the limit counts for (an IP, a user ...).
	Key string `json:"key"`
	// Cost is the number of units; 0 sends none, and the service charges
	// one request of the limit (its cost in the policy file, 1 by default).
	Cost int64 `json:"cost,omitempty"`
}

// HTTPOptions configure an HTTP client. The zero value is usable.
type HTTPOptions struct {
	// Client sends the requests; nil means a client with no retries of
	// its own over http.DefaultTransport.
	Client *http.Client
	// Timeout bounds each check when ctx has no earlier deadline. Zero
	// means 2s.
	Timeout time.Duration
}

// HTTP asks Floodgate's HTTP check API (POST /v1/check, /v1/peek).
type HTTP struct {
	base    string
	client  *http.Client
	timeout time.Duration
}

// NewHTTP returns a client for the service at baseURL
// (for example "http://127.0.0.1:8081").
func NewHTTP(baseURL string, opts HTTPOptions) *HTTP {
	c := opts.Client
	if c == nil {
		c = &http.Client{}
	}
	t := opts.Timeout
	if t <= 0 {
		t = 2 * time.Second
	}
	return &HTTP{base: strings.TrimRight(baseURL, "/"), client: c, timeout: t}
}

// Check asks whether the hits may pass and charges them all if so.
func (c *HTTP) Check(ctx context.Context, hits ...Hit) (Decision, error) {
	return c.do(ctx, "/v1/check", hits)
}

// Peek asks what Check would answer without charging anything.
func (c *HTTP) Peek(ctx context.Context, hits ...Hit) (Decision, error) {
	return c.do(ctx, "/v1/peek", hits)
}

// Wait blocks until Check allows the hits, as the package's Wait does.
func (c *HTTP) Wait(ctx context.Context, opts WaitOptions, hits ...Hit) (Decision, error) {
	return Wait(ctx, func(ctx context.Context) (Decision, error) { return c.Check(ctx, hits...) }, opts)
}

// answer is the JSON the HTTP API sends back, decisions left out.
type answer struct {
	Allowed    *bool   `json:"allowed"`
	Limit      int64   `json:"limit"`
	Remaining  int64   `json:"remaining"`
	RetryAfter float64 `json:"retry_after"`
	Reset      float64 `json:"reset"`
	Delay      float64 `json:"delay"`
	Binding    string  `json:"binding_limit"`
	Error      string  `json:"error"`
	Code       string  `json:"code"`
}

func (c *HTTP) do(ctx context.Context, path string, hits []Hit) (Decision, error) {
	if len(hits) == 0 {
		return Decision{}, fmt.Errorf("client: check: no hits")
	}
	if err := validHits(hits); err != nil {
		return Decision{}, fmt.Errorf("client: check: %w", err)
	}
	body, err := json.Marshal(struct {
		Hits []Hit `json:"hits"`
	}{hits})
	if err != nil {
		return Decision{}, fmt.Errorf("client: check: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return Decision{}, fmt.Errorf("client: check: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return Decision{}, fmt.Errorf("client: check: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Decision{}, fmt.Errorf("client: check: read answer: %w", err)
	}
	var a answer
	jerr := json.Unmarshal(raw, &a)
	switch {
	case (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusTooManyRequests) && jerr == nil && a.Allowed != nil:
		return Decision{
			Allowed:    *a.Allowed,
			Limit:      a.Limit,
			Remaining:  a.Remaining,
			RetryAfter: seconds(a.RetryAfter),
			ResetAfter: seconds(a.Reset),
			Delay:      seconds(a.Delay),
			Binding:    a.Binding,
		}, nil
	case a.Code == "never_fits":
		return Decision{Binding: a.Binding}, errNeverFits(a.Error)
	}
	return Decision{}, &StatusError{Code: resp.StatusCode, Message: a.Error}
}

// validHits returns an error wrapping ErrInvalidHit for the first hit
// whose limit name or key is not valid UTF-8.
func validHits(hits []Hit) error {
	for i := range hits {
		h := &hits[i]
		switch {
		case !utf8.ValidString(h.Limit):
			return fmt.Errorf("%w: hit %d: limit %q is not valid UTF-8", ErrInvalidHit, i, h.Limit)
		case !utf8.ValidString(h.Key):
			return fmt.Errorf("%w: hit %d: key %q is not valid UTF-8", ErrInvalidHit, i, h.Key)
		}
	}
	return nil
}

// seconds turns a JSON number of seconds into a Duration, clamping
// nonsense to 0 and huge values to a year.
func seconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	if s > 365*24*3600 {
		s = 365 * 24 * 3600
	}
	return time.Duration(math.Round(s * float64(time.Second)))
}
