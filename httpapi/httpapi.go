package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/internal/browser"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Limit is a limit the API checks: its rule and its part of the response
// fields.
type Limit struct {
	Rule   *limiter.Rule
	Fields *fields.Limit
	// Cost is what a hit that gives no cost takes: one request of the
	// limit, as the gateway charges it (policy.Limit.DefaultCost). Zero
	// means 1.
	Cost int64
	// ReserveTTL is how long a reservation of the limit is held when the
	// reserve names no ttl: the limit's reserve_ttl, as the gateway holds
	// its reservations of it. Zero means floodgate.DefaultReservationTTL.
	ReserveTTL time.Duration
}

// Limits finds a limit by name.
type Limits interface {
	Limit(name string) (Limit, bool)
}

// Rules returns a fixed set of limits, found by their names, for programs
// without a policy file.
func Rules(rules ...*limiter.Rule) Limits {
	m := make(ruleSet, len(rules))
	for _, r := range rules {
		m[r.Name()] = Limit{Rule: r, Fields: fields.ForRule(r)}
	}
	return m
}

type ruleSet map[string]Limit

func (s ruleSet) Limit(name string) (Limit, bool) {
	l, ok := s[name]
	return l, ok
}

// PolicyLimits finds limits in the policy current returns at each call,
// such as (*policy.Reloader).Policy, so that reloads take effect at once.
// It remembers the rules that reservations were made on and that a reload
// then changed or removed, each until the last reservation made on it
// expires, so that a reservation made before the reload is settled on the
// limit it was made on, as the gateway settles a request in flight across
// a reload (a changed limit counts afresh), however many reloads changed
// that limit since. It remembers at most maxReplaced such rules, those
// whose reservations end first going first when more are open, and none
// that no reservation was made on.
func PolicyLimits(current func() *policy.Policy) Limits {
	return &policyLimits{current: current}
}

type policyLimits struct {
	current func() *policy.Policy
	seen    atomic.Pointer[policy.Policy] // the policy current last returned
	// reserved holds, by ruleKey, the rules reservations were made on
	// (*reservedRule) since the last reload that kept them; observe
	// moves those a reload replaced to replaced.
	reserved sync.Map
	mu       sync.Mutex // serialises observe; guards replaced
	// replaced holds the rules reloads replaced, by ruleKey, each while
	// a reservation made on it may live.
	replaced map[ruleKey]replacedRule
	seq      uint64 // the order rules were replaced in
}

// ruleKey names a rule as a reservation token does: its limit's name and
// the rule's ID (limits may share an ID, counts_as).
type ruleKey struct{ name, id string }

// reservedRule is a rule reservations were made on, and the instant (Unix
// nanoseconds) until which the last of them is held.
type reservedRule struct {
	rule  *limiter.Rule
	until atomic.Int64
}

// hold notes a reservation on r held until until. It moves r's instant
// a second past it, so that a rule reserved on all the time is written
// about once a second.
func (r *reservedRule) hold(until int64) {
	for {
		old := r.until.Load()
		if until <= old || r.until.CompareAndSwap(old, until+int64(time.Second)) {
			return
		}
	}
}

// replacedRule is a rule a reload replaced, kept while a reservation made
// on it may live.
type replacedRule struct {
	*reservedRule
	seq uint64
}

// maxReplaced caps the replaced rules remembered.
const maxReplaced = 4096

// maxReplacedByName caps the replaced rules a settle of a token that names
// no rule (one made before tokens named them) tries, the most recent
// first.
const maxReplacedByName = 4

// replacer is implemented by Limits that remember the rules reloads
// replaced (PolicyLimits).
type replacer interface {
	// Reserved notes that a reservation was made on rule, the rule of the
	// limit name, and is held until until.
	Reserved(name string, rule *limiter.Rule, until time.Time)
	// ReplacedRule returns the rule of the limit name whose ID is id
	// that a reservation was made on, nil when none is remembered.
	ReplacedRule(name, id string) *limiter.Rule
	// Replaced returns the rules of the limit name that reloads
	// replaced, the most recent first, at most maxReplacedByName.
	Replaced(name string) []*limiter.Rule
}

// policy returns the current policy, noting the rules a reload replaced.
func (f *policyLimits) policy() *policy.Policy {
	p := f.current()
	if p != nil && f.seen.Load() != p {
		f.observe(p)
	}
	return p
}

// observe notes p as the current policy and remembers the rules
// reservations were made on that p changed or removed, while a
// reservation made on them may live.
func (f *policyLimits) observe(p *policy.Policy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.seen.Swap(p)
	if old == nil || old == p {
		return
	}
	now := time.Now().UnixNano()
	if f.replaced == nil {
		f.replaced = make(map[ruleKey]replacedRule)
	}
	for k, r := range f.replaced {
		if r.until.Load() <= now {
			delete(f.replaced, k)
		}
	}
	f.reserved.Range(func(key, value any) bool {
		k, r := key.(ruleKey), value.(*reservedRule)
		if l, ok := p.Limit(k.name); ok && l != nil && l.Rule != nil && l.Rule.ID() == k.id && r.until.Load() > now {
			return true // still the limit's rule
		}
		f.reserved.Delete(k)
		if r.until.Load() <= now {
			return true // no reservation made on it lives
		}
		if was, ok := f.replaced[k]; ok {
			r.hold(was.until.Load()) // noted again by a reserve that raced a reload
		}
		f.seq++
		f.replaced[k] = replacedRule{reservedRule: r, seq: f.seq}
		return true
	})
	if over := len(f.replaced) - maxReplaced; over > 0 {
		// Full: the rules whose reservations end first go (a settle of
		// them is then 404 unknown_reservation, as after a restart).
		keys := make([]ruleKey, 0, len(f.replaced))
		for k := range f.replaced {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b ruleKey) int {
			return cmp.Compare(f.replaced[a].until.Load(), f.replaced[b].until.Load())
		})
		for _, k := range keys[:over] {
			delete(f.replaced, k)
		}
	}
}

// Reserved notes that a reservation was made on rule, the rule of the
// limit name, held until until.
func (f *policyLimits) Reserved(name string, rule *limiter.Rule, until time.Time) {
	k := ruleKey{name, rule.ID()}
	v, ok := f.reserved.Load(k)
	if !ok {
		v, _ = f.reserved.LoadOrStore(k, &reservedRule{rule: rule})
	}
	v.(*reservedRule).hold(until.UnixNano())
}

// ReplacedRule returns the rule of the limit name whose ID is id that a
// reservation was made on and a reload replaced, while a reservation
// made on it may live.
func (f *policyLimits) ReplacedRule(name, id string) *limiter.Rule {
	f.policy()
	k := ruleKey{name, id}
	if v, ok := f.reserved.Load(k); ok {
		return v.(*reservedRule).rule
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.replaced[k]; ok && r.until.Load() > time.Now().UnixNano() {
		return r.rule
	}
	return nil
}

// Replaced returns the rules of the limit name that reloads replaced
// while a reservation made on them may live, the most recent first, at
// most maxReplacedByName.
func (f *policyLimits) Replaced(name string) []*limiter.Rule {
	f.policy()
	f.mu.Lock()
	var list []replacedRule
	for k, r := range f.replaced {
		if k.name == name {
			list = append(list, r)
		}
	}
	f.mu.Unlock()
	slices.SortFunc(list, func(a, b replacedRule) int { return cmp.Compare(b.seq, a.seq) })
	var out []*limiter.Rule
	for _, r := range list[:min(len(list), maxReplacedByName)] {
		out = append(out, r.rule)
	}
	return out
}

func (f *policyLimits) Limit(name string) (Limit, bool) {
	p := f.policy()
	if p == nil {
		return Limit{}, false
	}
	l, ok := p.Limit(name)
	if !ok || l == nil || l.Rule == nil {
		return Limit{}, false
	}
	out := Limit{Rule: l.Rule, Fields: l.Fields, Cost: l.DefaultCost()}
	if l.Costs != nil {
		out.ReserveTTL = l.Costs.TTL
	}
	return out, true
}

// Options configure a Handler. The zero value is usable.
type Options struct {
	// MaxBodyBytes caps a request body; larger is 413. Zero means 64 KiB.
	MaxBodyBytes int64
	// MaxHits caps the hits of one request: a body with more is refused
	// before it is decoded. Zero means 32.
	MaxHits int
	// MaxKeyBytes caps a key's length. Zero means 512.
	MaxKeyBytes int
	// Logger receives engine errors. Default: discard.
	Logger *slog.Logger
	// Observer receives the API's own answers (its 429s), for metrics;
	// the decisions themselves are counted by the engine.
	Observer Observer
	// Fields, when set, returns the switches of the answers' rate-limit
	// fields, asked at each answer so that a reload applies at once: in
	// floodgate serve the policy file's server.headers, read as the
	// gateway reads them, so that a check is answered the fields a
	// request through the gateway gets. Nil: RateLimit-Policy, RateLimit
	// and, on a denial, Retry-After.
	Fields func() fields.Options
	// Tokens, when set, authenticates callers: a request must carry
	// "Authorization: Bearer TOKEN" with a token Tokens knows, else it is
	// answered 401 and asks the engine nothing. Nil leaves the API open
	// to services, and answers no browser (see the package
	// documentation).
	Tokens Tokens
}

// Tokens knows the bearer tokens of the API's callers.
type Tokens interface {
	// Known reports whether token is a caller's.
	Known(token string) bool
}

// TokenHashes is a fixed set of tokens known by their SHA-256, as the
// policy file keeps them.
type TokenHashes map[[sha256.Size]byte]bool

// Known reports whether the token's SHA-256 is in the set.
func (t TokenHashes) Known(token string) bool { return t[sha256.Sum256([]byte(token))] }

// Observer receives the answers the API gives itself. *metrics.Metrics
// is one.
type Observer interface {
	Rejected(front limiter.FrontEnd, limit string, status int)
}

// Handler serves POST /v1/check, /v1/peek, /v1/reserve and /v1/settle.
// Like every front end it turns its request into hits, asks the engine,
// and turns the Result into its answer; decisions are counted by the
// engine's Observer, labelled front_end="http_api".
type Handler struct {
	eng      limiter.Engine
	limits   Limits
	log      *slog.Logger
	obs      Observer
	maxBody  int64
	maxHits  int
	maxKey   int
	tokens   Tokens
	fields   func() fields.Options
	renderer fields.Renderer
}

// New returns the HTTP check API over eng, with limits found in limits.
func New(eng limiter.Engine, limits Limits, opts Options) *Handler {
	h := &Handler{eng: eng, limits: limits, log: opts.Logger, obs: opts.Observer, tokens: opts.Tokens,
		fields: opts.Fields, maxBody: opts.MaxBodyBytes, maxHits: opts.MaxHits, maxKey: opts.MaxKeyBytes}
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
	CodeUnauthorized     = "unauthorized"
	CodeBrowser          = "browser"
)

// ServeHTTP routes /v1/check, /v1/peek, /v1/reserve and /v1/settle.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var peek bool
	serve := h.check
	switch r.URL.Path {
	case "/v1/check":
	case "/v1/peek":
		peek = true
	case "/v1/reserve":
		serve = h.reserve
	case "/v1/settle":
		serve = h.settle
	default:
		writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint (POST /v1/check, /v1/peek, /v1/reserve or /v1/settle)", nil)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, CodeMethod, "use POST", nil)
		return
	}
	// Without tokens the API trusts whoever reaches it, and a browser
	// reaches it for any page it opens: a page of another site posts
	// without a preflight (a form, a no-cors fetch of text/plain), and
	// one whose name was rebound to the API's address reads the answers
	// as its own origin's. Services send neither field a browser adds.
	if h.tokens == nil && browser.Sent(r) {
		if h.obs != nil {
			h.obs.Rejected(limiter.FrontHTTPAPI, "", http.StatusForbidden)
		}
		writeError(w, http.StatusForbidden, CodeBrowser, "this check API takes no token, so it answers no browser "+
			"(the request carries Origin or Sec-Fetch-Site): any page the browser opens could send it", nil)
		return
	}
	if h.tokens != nil && !h.authorized(r) {
		if h.obs != nil {
			h.obs.Rejected(limiter.FrontHTTPAPI, "", http.StatusUnauthorized)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
		writeError(w, http.StatusUnauthorized, CodeUnauthorized, "send Authorization: Bearer TOKEN with a token of server.api_tokens", nil)
		return
	}
	body, apiErr := h.readBody(w, r)
	if apiErr != nil {
		writeError(w, apiErr.status, apiErr.code, apiErr.msg, apiErr.extra)
		return
	}
	serve(w, r, body, peek)
}

// check answers /v1/check and /v1/peek.
func (h *Handler) check(w http.ResponseWriter, r *http.Request, body []byte, peek bool) {
	q, apiErr := h.parse(body)
	if apiErr != nil {
		writeError(w, apiErr.status, apiErr.code, apiErr.msg, apiErr.extra)
		return
	}
	req := limiter.Request{Front: limiter.FrontHTTPAPI, Peek: peek, Hits: q.hits}
	var res limiter.Result
	ctx := r.Context()
	if !peek {
		// A caller that leaves may go ahead by its own failure policy:
		// its check is decided all the same, even one still waiting for
		// the store, within the engine's store timeout.
		ctx = context.WithoutCancel(ctx)
	}
	if err := h.eng.Decide(ctx, &req, &res); err != nil {
		if errors.Is(err, floodgate.ErrNeverFits) {
			writeError(w, http.StatusUnprocessableEntity, CodeNeverFits, err.Error(), nil)
			return
		}
		h.log.Warn("httpapi: engine", "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the limiter cannot decide now", nil)
		return
	}
	h.answer(w, peek, q, &res, nil)
}

// authorized reports whether r carries a known bearer token.
func (h *Handler) authorized(r *http.Request) bool {
	v := r.Header.Get("Authorization")
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return false
	}
	tok := strings.TrimSpace(v[7:])
	return tok != "" && len(tok) <= 4096 && h.tokens.Known(tok)
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
	// rule is, for a hit of a reservation token, the ID of the rule it
	// was reserved on ("" in a token made before tokens named it).
	rule string
}

// wireRequest is a posted body: either {"hits": [...]} or one hit.
type wireRequest struct {
	Hits []wireHit `json:"hits"`
	wireHit
}

// query is a decoded request: the hits, the limits' names as the caller
// wrote them, and their fields.
type query struct {
	hits   []limiter.Hit
	names  []string
	keys   []string // as sent: the engine may replace a long hit key by its hash
	fields []*fields.Limit
	// ttl is the longest ReserveTTL of the hits' limits (0: none has
	// one), which a reservation without a ttl is held for, as the
	// gateway holds one of these limits.
	ttl time.Duration
}

// readBody reads the body, at most Options.MaxBodyBytes of it.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, bad(http.StatusRequestEntityTooLarge, CodeTooLarge, "body larger than %d bytes", h.maxBody)
		}
		return nil, bad(http.StatusBadRequest, CodeBadRequest, "reading the body: %v", err)
	}
	return body, nil
}

// errCost reports a cost that is not a whole number.
type errCost struct {
	cost      string
	notNumber bool // a string or another JSON value, not a number
}

func (e *errCost) Error() string {
	if e.notNumber {
		return fmt.Sprintf("cost %s is not a JSON number", e.cost)
	}
	return fmt.Sprintf("cost %s is not a whole number that fits 64 bits", e.cost)
}

// errField reports a string field that is not a string, or not text that
// decodes exactly (see unquote).
type errField struct {
	field string
	err   error
}

func (e *errField) Error() string { return fmt.Sprintf("%q %v", e.field, e.err) }

func (e *errField) Unwrap() error { return e.err }

// decodeError answers the error of decoding a body: invalid_cost for a
// cost, bad_request for a field that is not exact text, bad_json else.
func decodeError(err error) *apiError {
	var ec *errCost
	if errors.As(err, &ec) {
		return bad(http.StatusBadRequest, CodeInvalidCost, "%v: a cost is a whole number of units, at least 1", ec)
	}
	var ef *errField
	if errors.As(err, &ef) {
		return bad(http.StatusBadRequest, CodeBadRequest, "%v", ef)
	}
	var el *lengthError
	if errors.As(err, &el) {
		return bad(http.StatusBadRequest, CodeBadRequest, "%v", el)
	}
	return bad(http.StatusBadRequest, CodeBadJSON, "invalid JSON: %v", err)
}

// parse turns a body into a query; it never charges anything.
func (h *Handler) parse(body []byte) (*query, *apiError) {
	var req wireRequest
	if err := decodeBody(body, &req, h.maxHits); err != nil {
		return nil, decodeError(err)
	}
	single := req.Limit != nil || req.Key != nil || req.Cost != nil
	var wh []wireHit
	switch {
	case req.Hits != nil && single:
		return nil, bad(http.StatusBadRequest, CodeBadRequest, `give either "hits" or one hit's "limit", "key" and "cost", not both`)
	case req.Hits != nil:
		wh = req.Hits
	case single:
		wh = []wireHit{req.wireHit}
	}
	return h.query(wh, false, false)
}

// query validates the hits of a request into a query; reserve allows
// concurrency limits, whose leases a settle ends. For a settle (the hits
// of a reservation token), a cost is the estimate reserved, which no
// capacity refuses (a reload may have shrunk the limit since), and a
// limit a reload removed is the last rule it had.
func (h *Handler) query(wh []wireHit, reserve, settle bool) (*query, *apiError) {
	if len(wh) == 0 {
		return nil, bad(http.StatusBadRequest, CodeBadRequest, `no hits: post {"limit": "...", "key": "...", "cost": 1} or {"hits": [...]}`)
	}
	if len(wh) > h.maxHits {
		return nil, bad(http.StatusBadRequest, CodeBadRequest, "%d hits, at most %d", len(wh), h.maxHits)
	}
	q := &query{hits: make([]limiter.Hit, len(wh)), names: make([]string, len(wh)), keys: make([]string, len(wh)),
		fields: make([]*fields.Limit, len(wh))}
	for i, x := range wh {
		if x.Limit == nil || *x.Limit == "" {
			return nil, bad(http.StatusBadRequest, CodeBadRequest, "hit %d: missing limit", i)
		}
		key := ""
		if x.Key != nil {
			key = *x.Key
		}
		if len(key) > h.maxKey {
			return nil, bad(http.StatusBadRequest, CodeBadRequest, "hit %d: key longer than %d bytes", i, h.maxKey)
		}
		if x.Cost != nil && *x.Cost < 1 {
			return nil, bad(http.StatusBadRequest, CodeInvalidCost, "hit %d: cost must be at least 1, got %d", i, *x.Cost)
		}
		lim, ok := h.limits.Limit(*x.Limit)
		if settle && x.rule != "" && (!ok || lim.Rule.ID() != x.rule) {
			// The token names the rule it was made on, which a reload
			// replaced: settled there when it is remembered.
			if r := h.replacedRule(*x.Limit, x.rule); r != nil {
				lim, ok = Limit{Rule: r}, true
			}
		}
		if !ok && settle {
			if rs := h.replaced(*x.Limit); len(rs) > 0 {
				lim, ok = Limit{Rule: rs[0]}, true
			}
		}
		rule := lim.Rule
		if !ok {
			e := bad(http.StatusNotFound, CodeUnknownLimit, "hit %d: unknown limit %q", i, *x.Limit)
			e.extra = map[string]any{"limit": *x.Limit}
			return nil, e
		}
		// A hit that gives no cost is one request of its limit, charged
		// what the gateway charges one.
		cost := max(lim.Cost, 1)
		if x.Cost != nil {
			cost = *x.Cost
		}
		if rule.Algorithm().Kind() == floodgate.KindConcurrency && !reserve {
			return nil, bad(http.StatusUnprocessableEntity, CodeUnsupportedLimit,
				"hit %d: %q is a concurrency limit, which needs a release: reserve it (POST /v1/reserve) and settle it", i, *x.Limit)
		}
		if c := rule.Params().Capacity(); cost > c && !settle {
			e := bad(http.StatusUnprocessableEntity, CodeNeverFits, "hit %d: cost %d exceeds the capacity %d of %q and can never pass", i, cost, c, *x.Limit)
			e.extra = map[string]any{"binding_limit": *x.Limit, "limit": c}
			return nil, e
		}
		q.hits[i] = limiter.Hit{Rule: rule, Key: counterKey(key), Cost: cost}
		q.keys[i] = key
		q.names[i] = *x.Limit
		q.fields[i] = lim.Fields
		q.ttl = max(q.ttl, lim.ReserveTTL)
		if q.fields[i] == nil {
			q.fields[i] = fields.ForRule(rule)
		}
	}
	return q, nil
}

// replaced returns the rules of the limit name that reloads replaced, the
// most recent first (none when the Limits remember none).
func (h *Handler) replaced(name string) []*limiter.Rule {
	if r, ok := h.limits.(replacer); ok {
		return r.Replaced(name)
	}
	return nil
}

// replacedRule returns the rule of the limit name with the ID id that a
// reservation was made on, when the Limits remember it (nil otherwise).
func (h *Handler) replacedRule(name, id string) *limiter.Rule {
	if r, ok := h.limits.(replacer); ok {
		return r.ReplacedRule(name, id)
	}
	return nil
}

// reserved notes, for Limits that remember replaced rules, that a
// reservation of q was made, held until until.
func (h *Handler) reserved(q *query, until time.Time) {
	r, ok := h.limits.(replacer)
	if !ok {
		return
	}
	for i := range q.hits {
		r.Reserved(q.names[i], q.hits[i].Rule, until)
	}
}

// hashedPrefix begins the key the engine counts a key longer than it
// keeps under (its SHA-256; see limiter.Options.MaxKeyBytes).
const hashedPrefix = "sha256:"

// counterKey is the key a posted key is counted under: the key itself,
// or, when it begins with hashedPrefix or with '%', the key behind a '%'.
// No key the API passes on then begins with hashedPrefix, so a short key
// spelled as the hash of a long one never shares its counter; and no two
// posted keys become one.
func counterKey(key string) string {
	if strings.HasPrefix(key, hashedPrefix) || strings.HasPrefix(key, "%") {
		return "%" + key
	}
	return key
}

// rawHit is a hit's fields as posted, checked by hit.
type rawHit struct {
	Limit json.RawMessage `json:"limit"`
	Key   json.RawMessage `json:"key"`
	Cost  json.RawMessage `json:"cost"`
}

// hit checks the fields: "limit" and "key" are strings decoded exactly
// (see unquote), "cost" a JSON number that is a whole number. A field
// given as null counts as not given.
func (r *rawHit) hit() (wireHit, error) {
	var x wireHit
	var err error
	if x.Limit, err = text("limit", r.Limit); err != nil {
		return x, err
	}
	if x.Key, err = text("key", r.Key); err != nil {
		return x, err
	}
	x.Cost, err = wholeCost(r.Cost)
	return x, err
}

// text decodes the string field name, or nil when it is absent or null.
func text(name string, raw json.RawMessage) (*string, error) {
	if isNull(raw) {
		return nil, nil
	}
	s, err := unquote(raw)
	if err != nil {
		return nil, &errField{field: name, err: err}
	}
	return &s, nil
}

// wholeCost reads a cost as a whole JSON number, so that 1.5, 1e400 or
// "1" (a string) is a clear error rather than a silent truncation or
// conversion; nil when it is absent or null.
func wholeCost(raw json.RawMessage) (*int64, error) {
	if isNull(raw) {
		return nil, nil
	}
	raw = bytes.TrimSpace(raw)
	if !isNumber(raw) {
		return nil, &errCost{cost: string(raw), notNumber: true}
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return nil, &errCost{cost: string(raw)}
	}
	return &n, nil
}

// isNull reports a field that is absent or null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// isNumber reports whether a JSON value is a number (not a string, which
// encoding/json would also take for a json.Number).
func isNumber(raw []byte) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// UnmarshalJSON reads a hit, its fields checked (rawHit.hit).
func (x *wireHit) UnmarshalJSON(b []byte) error {
	var raw rawHit
	if err := decodePart(b, &raw); err != nil {
		return err
	}
	h, err := raw.hit()
	if err != nil {
		return err
	}
	*x = h
	return nil
}

// UnmarshalJSON reads either form of the body.
func (r *wireRequest) UnmarshalJSON(b []byte) error {
	var raw struct {
		Hits []wireHit `json:"hits"`
		rawHit
	}
	if err := decodePart(b, &raw); err != nil {
		return err
	}
	r.Hits = raw.Hits
	if raw.Hits != nil && len(raw.Hits) == 0 {
		r.Hits = []wireHit{}
	}
	h, err := raw.hit()
	if err != nil {
		return err
	}
	r.wireHit = h
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
	// Reservation names an allowed reservation (POST /v1/reserve), for
	// POST /v1/settle.
	Reservation string `json:"reservation,omitempty"`
}

// answer writes the answer to a check, a peek or (with rsv set) a
// reservation.
func (h *Handler) answer(w http.ResponseWriter, peek bool, q *query, res *limiter.Result, rsv *reservation) {
	out := Response{Allowed: res.Allowed, Degraded: res.Degraded != limiter.NotDegraded, Decisions: make([]Decision, len(q.hits))}
	if rsv != nil && res.Allowed {
		out.Reservation = rsv.encode()
	}
	for i := range q.hits {
		d := res.Decisions[i]
		out.Decisions[i] = Decision{
			Limit: q.names[i], Key: q.keys[i], Allowed: d.Allowed,
			Capacity: d.Limit, Remaining: d.Remaining,
			RetryAfter: secs(d.RetryAfter), Reset: secs(d.ResetAfter), Delay: secs(d.Delay),
			Shadow: res.Flags[i]&limiter.Shadow != 0, Degraded: res.Flags[i]&limiter.Degraded != 0,
		}
	}
	binding := res.Binding
	if binding < 0 || binding >= len(q.hits) {
		binding = 0
	}
	b := res.Decisions[binding]
	out.Limit, out.Remaining, out.Reset = b.Limit, b.Remaining, secs(b.ResetAfter)
	out.Binding = q.names[binding]
	out.RetryAfter = secs(res.RetryAfter)
	out.Delay = secs(res.Delay)
	if res.Allowed {
		out.RetryAfter = 0
	}
	denied := !res.Allowed && !peek
	items, bi := fields.AppendResult(nil, res, q.fields)
	var fo *fields.Options
	if h.fields != nil {
		o := h.fields()
		fo = &o
	}
	hdr := w.Header()
	for _, f := range h.renderer.Render(nil, items, bi, denied, res.RetryAfter, fo) {
		hdr.Set(f.Name, f.Value)
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	status := http.StatusOK
	if denied {
		status = http.StatusTooManyRequests
		if h.obs != nil {
			// The rule's own name (the one the caller wrote, as the
			// policy holds it): metrics find its series by that string.
			h.obs.Rejected(limiter.FrontHTTPAPI, q.hits[binding].Rule.Name(), status)
		}
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(&out)
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

// remembered returns how many replaced rules f remembers.
func (f *policyLimits) remembered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.replaced)
}
