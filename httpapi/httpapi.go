package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Engine checks and charges hits all or nothing; *limiter.Limiter is the
// implementation.
type Engine interface {
	Check(ctx context.Context, hits []limiter.Hit) (limiter.Result, error)
	Peek(ctx context.Context, hits []limiter.Hit) (limiter.Result, error)
}

// Limits finds a limit's compiled rule by name.
type Limits interface {
	Rule(name string) (*limiter.Rule, bool)
}

// Rules is a fixed set of limits by name.
type Rules map[string]*limiter.Rule

// Rule returns the rule named name.
func (r Rules) Rule(name string) (*limiter.Rule, bool) {
	rule, ok := r[name]
	return rule, ok && rule != nil
}

// PolicyLimits finds limits in the policy current returns at each call,
// such as (*policy.Reloader).Policy, so that reloads take effect at once.
func PolicyLimits(current func() *policy.Policy) Limits {
	return policyLimits(current)
}

type policyLimits func() *policy.Policy

func (f policyLimits) Rule(name string) (*limiter.Rule, bool) {
	p := f()
	if p == nil {
		return nil, false
	}
	l, ok := p.Limit(name)
	if !ok || l == nil || l.Rule == nil {
		return nil, false
	}
	return l.Rule, true
}

// Options configure a Handler. The zero value is usable.
type Options struct {
	// MaxBodyBytes caps a request body; larger is 413. Zero means 64 KiB.
	MaxBodyBytes int64
	// MaxHits caps the hits of one request. Zero means 32.
	MaxHits int
	// MaxKeyBytes caps a key's length. Zero means 512.
	MaxKeyBytes int
	// Logger receives engine errors. Default: discard.
	Logger *slog.Logger
	// Observe, when set, is called once per hit of every decided check
	// (not for peeks): the limit's name, whether the hit allowed, whether
	// the limit is in shadow mode, and whether the store was failing.
	Observe func(limit string, allowed, shadow, degraded bool)
}

// Handler serves POST /v1/check and POST /v1/peek.
type Handler struct {
	eng     Engine
	limits  Limits
	log     *slog.Logger
	maxBody int64
	maxHits int
	maxKey  int
	observe func(limit string, allowed, shadow, degraded bool)
	headers sync.Map // *limiter.Rule → *gateway.LimitHeader
}

// New returns the HTTP check API over eng, with limits found in limits.
func New(eng Engine, limits Limits, opts Options) *Handler {
	h := &Handler{eng: eng, limits: limits, log: opts.Logger,
		maxBody: opts.MaxBodyBytes, maxHits: opts.MaxHits, maxKey: opts.MaxKeyBytes, observe: opts.Observe}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.maxBody <= 0 {
		h.maxBody = 64 << 10
	}
	if h.maxHits <= 0 {
		h.maxHits = 32
	}
	if h.maxKey <= 0 {
		h.maxKey = 512
	}
	return h
}

// Error codes in error answers.
const (
	CodeBadJSON          = "bad_json"
	CodeBadRequest       = "bad_request"
	CodeInvalidCost      = "invalid_cost"
	CodeUnknownLimit     = "unknown_limit"
	CodeNeverFits        = "never_fits"
	CodeUnsupportedLimit = "unsupported_limit"
	CodeTooLarge         = "too_large"
	CodeMethod           = "method_not_allowed"
	CodeNotFound         = "not_found"
	CodeUnavailable      = "unavailable"
)

// ServeHTTP routes /v1/check and /v1/peek.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var peek bool
	switch r.URL.Path {
	case "/v1/check":
	case "/v1/peek":
		peek = true
	default:
		writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint (POST /v1/check or /v1/peek)", nil)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, CodeMethod, "use POST", nil)
		return
	}
	hits, names, apiErr := h.decode(w, r)
	if apiErr != nil {
		writeError(w, apiErr.status, apiErr.code, apiErr.msg, apiErr.extra)
		return
	}
	var res limiter.Result
	var err error
	if peek {
		res, err = h.eng.Peek(r.Context(), hits)
	} else {
		res, err = h.eng.Check(r.Context(), hits)
	}
	if err != nil {
		if errors.Is(err, floodgate.ErrNeverFits) {
			writeError(w, http.StatusUnprocessableEntity, CodeNeverFits, err.Error(), nil)
			return
		}
		h.log.Warn("httpapi: engine", "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the limiter cannot decide now", nil)
		return
	}
	h.answer(w, peek, hits, names, &res)
}

// apiError is a 4xx answer.
type apiError struct {
	status int
	code   string
	msg    string
	extra  map[string]any
}

func bad(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// wireHit is one hit as posted.
type wireHit struct {
	Limit *string `json:"limit"`
	Key   *string `json:"key"`
	Cost  *int64  `json:"cost"`
}

// wireRequest is a posted body: either {"hits": [...]} or one hit.
type wireRequest struct {
	Hits []wireHit `json:"hits"`
	wireHit
}

// decode reads and validates the body into hits; names are the limits'
// names as the caller wrote them.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request) ([]limiter.Hit, []string, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, nil, bad(http.StatusRequestEntityTooLarge, CodeTooLarge, "body larger than %d bytes", h.maxBody)
		}
		return nil, nil, bad(http.StatusBadRequest, CodeBadRequest, "reading the body: %v", err)
	}
	return h.parse(body)
}

// parse turns a body into hits; it never charges anything.
func (h *Handler) parse(body []byte) ([]limiter.Hit, []string, *apiError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var req wireRequest
	if err := dec.Decode(&req); err != nil {
		return nil, nil, bad(http.StatusBadRequest, CodeBadJSON, "invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, bad(http.StatusBadRequest, CodeBadJSON, "invalid JSON: data after the object")
	}
	single := req.Limit != nil || req.Key != nil || req.Cost != nil
	var wh []wireHit
	switch {
	case req.Hits != nil && single:
		return nil, nil, bad(http.StatusBadRequest, CodeBadRequest, `give either "hits" or one hit's "limit", "key" and "cost", not both`)
	case req.Hits != nil:
		wh = req.Hits
	case single:
		wh = []wireHit{req.wireHit}
	}
	if len(wh) == 0 {
		return nil, nil, bad(http.StatusBadRequest, CodeBadRequest, `no hits: post {"limit": "...", "key": "...", "cost": 1} or {"hits": [...]}`)
	}
	if len(wh) > h.maxHits {
		return nil, nil, bad(http.StatusBadRequest, CodeBadRequest, "%d hits, at most %d", len(wh), h.maxHits)
	}
	hits := make([]limiter.Hit, len(wh))
	names := make([]string, len(wh))
	for i, x := range wh {
		if x.Limit == nil || *x.Limit == "" {
			return nil, nil, bad(http.StatusBadRequest, CodeBadRequest, "hit %d: missing limit", i)
		}
		key := ""
		if x.Key != nil {
			key = *x.Key
		}
		if len(key) > h.maxKey {
			return nil, nil, bad(http.StatusBadRequest, CodeBadRequest, "hit %d: key longer than %d bytes", i, h.maxKey)
		}
		cost := int64(1)
		if x.Cost != nil {
			cost = *x.Cost
			if cost < 1 {
				return nil, nil, bad(http.StatusBadRequest, CodeInvalidCost, "hit %d: cost must be at least 1, got %d", i, cost)
			}
		}
		rule, ok := h.limits.Rule(*x.Limit)
		if !ok {
			e := bad(http.StatusNotFound, CodeUnknownLimit, "hit %d: unknown limit %q", i, *x.Limit)
			e.extra = map[string]any{"limit": *x.Limit}
			return nil, nil, e
		}
		if rule.Limit.Algorithm.Kind() == floodgate.KindConcurrency {
			return nil, nil, bad(http.StatusUnprocessableEntity, CodeUnsupportedLimit,
				"hit %d: %q is a concurrency limit, which needs a release the check API does not offer", i, *x.Limit)
		}
		if c := rule.Params.Capacity(); cost > c {
			e := bad(http.StatusUnprocessableEntity, CodeNeverFits, "hit %d: cost %d exceeds the capacity %d of %q and can never pass", i, cost, c, *x.Limit)
			e.extra = map[string]any{"binding_limit": *x.Limit, "limit": c}
			return nil, nil, e
		}
		hits[i] = limiter.Hit{Rule: rule, Key: key, Cost: cost}
		names[i] = *x.Limit
	}
	return hits, names, nil
}

// UnmarshalJSON reads a cost as a whole number, so that 1.5 or 1e400 is a
// clear error rather than a silent truncation.
func (x *wireHit) UnmarshalJSON(b []byte) error {
	var raw struct {
		Limit *string      `json:"limit"`
		Key   *string      `json:"key"`
		Cost  *json.Number `json:"cost"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	x.Limit, x.Key, x.Cost = raw.Limit, raw.Key, nil
	if raw.Cost != nil {
		n, err := strconv.ParseInt(raw.Cost.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("cost %s is not a whole number", raw.Cost.String())
		}
		x.Cost = &n
	}
	return nil
}

// UnmarshalJSON reads either form of the body.
func (r *wireRequest) UnmarshalJSON(b []byte) error {
	var raw struct {
		Hits  []wireHit    `json:"hits"`
		Limit *string      `json:"limit"`
		Key   *string      `json:"key"`
		Cost  *json.Number `json:"cost"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	r.Hits = raw.Hits
	if raw.Hits != nil && len(raw.Hits) == 0 {
		r.Hits = []wireHit{}
	}
	r.Limit, r.Key, r.Cost = raw.Limit, raw.Key, nil
	if raw.Cost != nil {
		n, err := strconv.ParseInt(raw.Cost.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("cost %s is not a whole number", raw.Cost.String())
		}
		r.Cost = &n
	}
	return nil
}

// Decision is one hit's answer in a response.
type Decision struct {
	Limit      string  `json:"limit"`
	Key        string  `json:"key"`
	Allowed    bool    `json:"allowed"`
	Capacity   int64   `json:"capacity"`
	Remaining  int64   `json:"remaining"`
	RetryAfter float64 `json:"retry_after"`
	Reset      float64 `json:"reset"`
	Delay      float64 `json:"delay,omitempty"`
	Shadow     bool    `json:"shadow,omitempty"`
	Degraded   bool    `json:"degraded,omitempty"`
}

// Response is the answer to a check or a peek.
type Response struct {
	Allowed    bool       `json:"allowed"`
	Limit      int64      `json:"limit"`
	Remaining  int64      `json:"remaining"`
	RetryAfter float64    `json:"retry_after"`
	Reset      float64    `json:"reset"`
	Delay      float64    `json:"delay,omitempty"`
	Binding    string     `json:"binding_limit"`
	Degraded   bool       `json:"degraded,omitempty"`
	Decisions  []Decision `json:"decisions"`
}

func (h *Handler) answer(w http.ResponseWriter, peek bool, hits []limiter.Hit, names []string, res *limiter.Result) {
	out := Response{Allowed: res.Allowed, Degraded: res.Degraded, Decisions: make([]Decision, len(hits))}
	covered := make([]gateway.Covered, 0, len(hits))
	binding := res.Binding
	if binding < 0 || binding >= len(hits) {
		binding = 0
	}
	for i := range hits {
		d := res.Decisions[i]
		rule := hits[i].Rule
		var degraded bool
		if i < len(res.Flags) {
			degraded = res.Flags[i]&limiter.Degraded != 0
		}
		out.Decisions[i] = Decision{
			Limit: names[i], Key: hits[i].Key, Allowed: d.Allowed,
			Capacity: d.Limit, Remaining: d.Remaining,
			RetryAfter: secs(d.RetryAfter), Reset: secs(d.ResetAfter), Delay: secs(d.Delay),
			Shadow: rule.Shadow, Degraded: degraded,
		}
		if h.observe != nil && !peek {
			h.observe(names[i], d.Allowed, rule.Shadow, degraded)
		}
		if rule.Shadow {
			continue
		}
		c := gateway.Covered{Header: h.header(rule), Decision: d}
		if i == binding {
			covered = append([]gateway.Covered{c}, covered...)
		} else {
			covered = append(covered, c)
		}
	}
	b := res.Decisions[binding]
	out.Limit, out.Remaining, out.Reset = b.Limit, b.Remaining, secs(b.ResetAfter)
	out.Binding = names[binding]
	out.RetryAfter = secs(res.RetryAfter)
	out.Delay = secs(res.Delay)
	if res.Allowed {
		out.RetryAfter = 0
	}
	hdr := w.Header()
	var t int64 = -1
	if len(covered) > 0 {
		t = gateway.SetRateLimit(hdr, covered, nil, nil)
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	status := http.StatusOK
	if !res.Allowed && !peek {
		status = http.StatusTooManyRequests
		hdr.Set("Retry-After", strconv.FormatInt(gateway.RetryAfterSeconds(res.RetryAfter, t), 10))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(&out)
}

// header returns the cached RateLimit pieces of a rule.
func (h *Handler) header(r *limiter.Rule) *gateway.LimitHeader {
	if v, ok := h.headers.Load(r); ok {
		return v.(*gateway.LimitHeader)
	}
	lh := gateway.NewLimitHeader(&r.Limit)
	h.headers.Store(r, lh)
	return lh
}

// secs is a duration in seconds with millisecond resolution.
func secs(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Ceil(float64(d)/float64(time.Millisecond)) / 1000
}

func writeError(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{"error": msg, "code": code}
	for k, v := range extra {
		body[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// Serve serves handler on lis until ctx ends, then shuts down gracefully,
// giving requests in flight up to grace (0: 10s) to finish.
func Serve(ctx context.Context, lis net.Listener, handler http.Handler, grace time.Duration) error {
	if grace <= 0 {
		grace = 10 * time.Second
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("httpapi: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("httpapi: serve: %w", err)
	}
	return nil
}
