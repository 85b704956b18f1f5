package admin

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Token is an admin token, by its SHA-256.
type Token struct {
	// Name names the token's holder in the audit log.
	Name string
	// SHA256 is the digest of the token.
	SHA256 [sha256.Size]byte
}

// Options configures the API. Keys, Audit, Policy and Engine are required.
type Options struct {
	// Tokens may call the API; with none, every call is refused.
	// SetTokens replaces them.
	Tokens []Token
	// Keys holds the keys managed through the API.
	Keys *keystore.Store
	// Audit keeps the log of changes.
	Audit AuditLog
	// Policy returns the current policy.
	Policy func() *policy.Policy
	// Engine answers usage questions with peeks.
	Engine limiter.Engine
	// Instance names this process in audit entries.
	Instance string
	// Logger receives each change (default: discard).
	Logger *slog.Logger
	// Now is the clock of audit entries and reset times (default
	// time.Now).
	Now func() time.Time
	// OnChange, if set, is called after each change with its action.
	OnChange func(action string)
	// Bans, when set, is the penalty box of /api/v1/bans.
	Bans BanBox
	// Access, when set, are the lists of /api/v1/access.
	Access AccessLists
	// Registerer, if set, gets floodgate_admin_audit_failures_total: the
	// changes made whose audit entry could not be written.
	Registerer prometheus.Registerer
}

// API serves the admin API under /api/v1/.
type API struct {
	o      Options
	log    *slog.Logger
	mux    *http.ServeMux
	tokens atomic.Pointer[[]Token] // the tokens in force: Options.Tokens, then SetTokens'
	// auditFailures counts the changes made whose audit entry was not
	// written (AuditFailures).
	auditFailures prometheus.Counter
}

// New builds the API.
func New(o Options) (*API, error) {
	if o.Keys == nil || o.Audit == nil || o.Policy == nil || o.Engine == nil {
		return nil, fmt.Errorf("admin: keys, audit, policy and engine are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &API{o: o, log: o.Logger, mux: http.NewServeMux(), auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_admin_audit_failures_total",
		Help: "Changes made through the admin API whose audit entry could not be written (the change stands).",
	})}
	if o.Registerer != nil {
		if err := o.Registerer.Register(a.auditFailures); err != nil {
			return nil, fmt.Errorf("admin: metrics: %w", err)
		}
	}
	a.SetTokens(o.Tokens)
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	for _, r := range []struct {
		pattern string
		h       func(w http.ResponseWriter, r *http.Request, actor string) (any, error)
	}{
		{"GET /api/v1/keys", a.listKeys},
		{"POST /api/v1/keys", a.createKey},
		{"GET /api/v1/keys/{name}", a.getKey},
		{"PATCH /api/v1/keys/{name}", a.updateKey},
		{"DELETE /api/v1/keys/{name}", a.deleteKey},
		{"POST /api/v1/keys/{name}/revoke", a.revokeKey},
		{"POST /api/v1/keys/{name}/rotate", a.rotateKey},
		{"POST /api/v1/keys/{name}/enable", a.enableKey},
		{"POST /api/v1/keys/{name}/disable", a.disableKey},
		{"POST /api/v1/keys/{name}/reset", a.resetKey},
		{"GET /api/v1/keys/{name}/usage", a.keyUsage},
		{"GET /api/v1/plans", a.plans},
		{"GET /api/v1/limits", a.limits},
		{"GET /api/v1/usage", a.usage},
		{"GET /api/v1/audit", a.audit},
		{"GET /api/v1/bans", a.listBans},
		{"DELETE /api/v1/bans", a.liftBan},
		{"GET /api/v1/access", a.listAccess},
		{"POST /api/v1/access", a.addAccess},
		{"DELETE /api/v1/access", a.removeAccess},
	} {
		a.mux.Handle(r.pattern, a.wrap(r.h))
	}
	a.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := a.Authenticate(r); !ok {
			writeError(w, http.StatusUnauthorized, "a valid bearer token is required")
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	return a, nil
}

// ServeHTTP serves the API.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// SetTokens replaces the tokens that may call the API, for a reload of
// the policy file: a token taken out is refused from the next request on.
// With none, every call is refused.
func (a *API) SetTokens(tokens []Token) {
	t := append([]Token(nil), tokens...)
	a.tokens.Store(&t)
}

// HasTokens reports whether any token may call the API.
func (a *API) HasTokens() bool { return len(*a.tokens.Load()) > 0 }

// Authenticate returns the name of the token r carries, if it is one of
// the configured tokens. The scheme is matched in any case (RFC 9110); a
// request with more than one Authorization header carries none.
func (a *API) Authenticate(r *http.Request) (string, bool) {
	auths := r.Header.Values("Authorization")
	if len(auths) != 1 {
		return "", false // none, or more than one: which would decide?
	}
	scheme, raw, ok := strings.Cut(auths[0], " ")
	raw = strings.TrimSpace(raw)
	if !ok || !strings.EqualFold(scheme, "Bearer") || raw == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(raw))
	name, found := "", 0
	for _, t := range *a.tokens.Load() {
		eq := subtle.ConstantTimeCompare(sum[:], t.SHA256[:])
		if eq == 1 && found == 0 {
			name = t.Name
		}
		found |= eq
	}
	return name, found == 1
}

// changeTimeout bounds a call that changes something (every method but GET
// and HEAD), with its audit entry. Such a call is not cut short when its
// caller leaves, so that a change made is a change recorded.
const changeTimeout = 10 * time.Second

// httpError is an error with its status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

func (a *API) wrap(h func(w http.ResponseWriter, r *http.Request, actor string) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.HasTokens() {
			writeError(w, http.StatusForbidden, "the admin API is off: no token in server.admin.tokens")
			return
		}
		actor, ok := a.Authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
			writeError(w, http.StatusUnauthorized, "a valid bearer token is required")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// A change goes on, and is audited, when its caller leaves:
			// a change cut short after its write would be made and not
			// recorded.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), changeTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		v, err := h(w, r, actor)
		if err != nil {
			var he *httpError
			switch {
			case errors.As(err, &he):
				writeError(w, he.status, he.msg)
			case errors.Is(err, keystore.ErrNotFound):
				writeError(w, http.StatusNotFound, err.Error())
			case errors.Is(err, keystore.ErrExists), errors.Is(err, keystore.ErrRevoked), errors.Is(err, keystore.ErrFull),
				errors.Is(err, keystore.ErrNotRevoked):
				writeError(w, http.StatusConflict, err.Error())
			case errors.Is(err, keystore.ErrBadName), errors.Is(err, keystore.ErrOverlap), errors.Is(err, policy.ErrUnknownPlan):
				writeError(w, http.StatusBadRequest, err.Error())
			default:
				a.log.Error("admin: call failed", "path", r.URL.Path, "err", err)
				writeError(w, http.StatusInternalServerError, err.Error())
			}
			return
		}
		status := http.StatusOK
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/keys" {
			status = http.StatusCreated
		}
		writeJSON(w, status, v)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// decode reads a JSON body into v, refusing unknown fields and anything
// after the object.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, "body: data after the object")
	}
	return nil
}

// decodeOptional is decode for a body that may be left out: a request
// with no bytes of body (no body, Content-Length 0, or a chunked body of
// no bytes) leaves v as it is.
func decodeOptional(r *http.Request, v any) error {
	br := bufio.NewReader(r.Body)
	if _, err := br.Peek(1); err == io.EOF {
		return nil
	} else if err != nil {
		return errorf(http.StatusBadRequest, "body: %v", err)
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	return decode(r, v)
}

// record audits a change.
func (a *API) record(ctx context.Context, actor, action, target string, detail map[string]any) {
	e := Entry{Time: a.o.Now().UTC(), Actor: actor, Action: action, Target: target, Detail: detail, Instance: a.o.Instance}
	if err := a.o.Audit.Append(ctx, e); err != nil {
		// The change is made (a revocation that a full disk undid would
		// be worse): it is logged and counted, for an alert.
		a.auditFailures.Inc()
		a.log.Error("admin: audit entry not written", "action", action, "target", target, "err", err)
	}
	a.log.Info("admin: "+action, "key", target, "actor", actor)
	if a.o.OnChange != nil {
		a.o.OnChange(action)
	}
}

// KeyView is a key as the API shows it.
type KeyView struct {
	Name   string `json:"name"`
	Plan   string `json:"plan"`
	Source string `json:"source"` // "file" or "api"
	// State is "active" (served), "disabled", "revoked", or, for a key of
	// the API that is neither but refused on the request path since a
	// reload: "shadowed" (a key of the file took its name), "plan_missing"
	// (its plan is gone) or "limits_invalid" (its own rate or burst no
	// longer makes a limit with its plan's).
	State string `json:"state"`
	// Secret is the key itself, only in the answer that made it.
	Secret     string            `json:"secret,omitempty"`
	Secrets    []keystore.Secret `json:"secrets,omitempty"`
	Rate       int64             `json:"rate,omitempty"`
	Burst      int64             `json:"burst,omitempty"`
	Quota      int64             `json:"quota,omitempty"`
	Generation int64             `json:"generation,omitempty"`
	Created    *time.Time        `json:"created,omitempty"`
	Updated    *time.Time        `json:"updated,omitempty"`
}

func viewOf(r *keystore.Record) KeyView {
	v := KeyView{Name: r.Name, Plan: r.Plan, Source: "api", State: "active", Secrets: r.Secrets,
		Rate: r.Rate, Burst: r.Burst, Quota: r.Quota, Generation: r.Generation, Created: &r.Created, Updated: &r.Updated}
	switch {
	case r.Revoked:
		v.State = "revoked"
	case r.Disabled:
		v.State = "disabled"
	}
	return v
}

// servedView is the view of r, a key of the API, against the policy p: a
// key neither revoked nor disabled is "active" only when the key store
// serves it with p, and otherwise says why it does not (keystore: a key
// of the file took its name, or the key does not resolve against p).
func servedView(p *policy.Policy, r *keystore.Record) KeyView {
	v := viewOf(r)
	if v.State != "active" {
		return v
	}
	if _, ok := p.FileKey(r.Name); ok {
		// Refused until the file lets the name go.
		v.State = "shadowed"
		return v
	}
	if _, err := p.NewKey(r.Name, r.Plan, keystore.ServingOptions(r)); errors.Is(err, policy.ErrUnknownPlan) {
		// Refused until a reload gives the plan back.
		v.State = "plan_missing"
	} else if err != nil {
		v.State = "limits_invalid"
	}
	return v
}

// served is servedView against the current policy.
func (a *API) served(r *keystore.Record) KeyView { return servedView(a.o.Policy(), r) }

// Keys lists every key: the file's, then the API's, each by name.
func (a *API) Keys() []KeyView {
	p := a.o.Policy()
	var out []KeyView
	for _, k := range p.File().Keys {
		out = append(out, KeyView{Name: k.Name, Plan: k.Plan, Source: "file", State: "active",
			Secrets: []keystore.Secret{{SHA256: k.SHA256}}})
	}
	for _, r := range a.o.Keys.List() {
		out = append(out, servedView(p, &r))
	}
	return out
}

func (a *API) listKeys(_ http.ResponseWriter, _ *http.Request, _ string) (any, error) {
	return map[string]any{"keys": a.Keys()}, nil
}

func (a *API) getKey(_ http.ResponseWriter, r *http.Request, _ string) (any, error) {
	name := r.PathValue("name")
	for _, v := range a.Keys() {
		if v.Name == name {
			return v, nil
		}
	}
	return nil, keystore.ErrNotFound
}

// keyBody is the body of a key's creation or change.
type keyBody struct {
	Name     string `json:"name"`
	Plan     string `json:"plan"`
	Rate     *int64 `json:"rate"`
	Burst    *int64 `json:"burst"`
	Quota    *int64 `json:"quota"`
	Disabled *bool  `json:"disabled"`
}

func (b *keyBody) overrides() (policy.KeyOptions, error) {
	var o policy.KeyOptions
	for _, f := range []struct {
		name string
		v    *int64
		into *int64
	}{{"rate", b.Rate, &o.Rate}, {"burst", b.Burst, &o.Burst}, {"quota", b.Quota, &o.Quota}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			return o, errorf(http.StatusBadRequest, "%s: must be 0 (the plan's) or more", f.name)
		}
		*f.into = *f.v
	}
	return o, nil
}

// fileKey reports whether the policy file has a key named name.
func (a *API) fileKey(name string) bool {
	_, ok := a.o.Policy().FileKey(name)
	return ok
}

func (a *API) createKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	var b keyBody
	if err := decode(r, &b); err != nil {
		return nil, err
	}
	if b.Name == "" || b.Plan == "" {
		return nil, errorf(http.StatusBadRequest, "name and plan are required")
	}
	if a.fileKey(b.Name) {
		return nil, errorf(http.StatusConflict, "the policy file has a key named %q", b.Name)
	}
	o, err := b.overrides()
	if err != nil {
		return nil, err
	}
	if _, err := a.o.Policy().NewKey(b.Name, b.Plan, o); err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	// A key asked for disabled is made disabled, in one write: never
	// usable, and never left usable by a second write that fails.
	create := a.o.Keys.Create
	disabled := b.Disabled != nil && *b.Disabled
	if disabled {
		create = a.o.Keys.CreateDisabled
	}
	raw, rec, err := create(r.Context(), b.Name, b.Plan, o)
	if err != nil {
		return nil, err
	}
	detail := map[string]any{"plan": b.Plan, "rate": o.Rate, "burst": o.Burst, "quota": o.Quota,
		"sha256_prefix": rec.Secrets[0].SHA256[:12]}
	if disabled {
		detail["disabled"] = true
	}
	a.record(r.Context(), actor, "key.create", b.Name, detail)
	v := a.served(&rec)
	v.Secret = raw
	return v, nil
}

// apiOnly refuses a change of a key of the file.
func (a *API) apiOnly(name string) error {
	if a.fileKey(name) {
		return errorf(http.StatusConflict, "key %q is in the policy file: change it there", name)
	}
	return nil
}

func (a *API) updateKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	name := r.PathValue("name")
	if err := a.apiOnly(name); err != nil {
		return nil, err
	}
	var b keyBody
	if err := decode(r, &b); err != nil {
		return nil, err
	}
	if b.Name != "" && b.Name != name {
		return nil, errorf(http.StatusBadRequest, "a key cannot be renamed")
	}
	if _, err := b.overrides(); err != nil {
		return nil, err
	}
	detail := map[string]any{}
	rec, err := a.o.Keys.Update(r.Context(), name, func(rec *keystore.Record) error {
		// Called again on a newer record when another instance changed the
		// key meanwhile: the detail is what this call changes on that one.
		clear(detail)
		was := *rec
		if b.Plan != "" && b.Plan != rec.Plan {
			detail["plan"] = []string{rec.Plan, b.Plan}
			rec.Plan = b.Plan
		}
		for _, f := range []struct {
			name string
			v    *int64
			into *int64
		}{{"rate", b.Rate, &rec.Rate}, {"burst", b.Burst, &rec.Burst}, {"quota", b.Quota, &rec.Quota}} {
			if f.v != nil && *f.v != *f.into {
				detail[f.name] = []int64{*f.into, *f.v}
				*f.into = *f.v
			}
		}
		if b.Disabled != nil && *b.Disabled != rec.Disabled {
			detail["disabled"] = *b.Disabled
			rec.Disabled = *b.Disabled
		}
		// The store checks the same; here a refusal is the caller's fault.
		// A change that leaves the plan and the key's own limits as they
		// were (a disable) is not checked: it holds also for a key whose
		// plan a reload removed.
		if o := keystore.ChangeOptions(&was, rec); !o.KeepOwn {
			if _, err := a.o.Policy().NewKey(rec.Name, rec.Plan, o); err != nil {
				return errorf(http.StatusBadRequest, "%v", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.record(r.Context(), actor, "key.update", name, detail)
	return a.served(&rec), nil
}

func (a *API) change(r *http.Request, actor, action string, f func(*keystore.Record) error, detail map[string]any) (any, error) {
	name := r.PathValue("name")
	if err := a.apiOnly(name); err != nil {
		return nil, err
	}
	rec, err := a.o.Keys.Update(r.Context(), name, f)
	if err != nil {
		return nil, err
	}
	a.record(r.Context(), actor, action, name, detail)
	return a.served(&rec), nil
}

// revokeKey revokes a key of the API, also one a key of the file shadows
// (its name given to the file's by a reload): it would work again once
// the file let the name go, and the file's key is not touched.
func (a *API) revokeKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	name := r.PathValue("name")
	revoke := func(rec *keystore.Record) error { rec.Revoked = true; return nil }
	if a.fileKey(name) {
		if _, err := a.o.Keys.Get(name); err != nil {
			return nil, a.apiOnly(name)
		}
		rec, err := a.o.Keys.Update(r.Context(), name, revoke)
		if err != nil {
			return nil, err
		}
		a.record(r.Context(), actor, "key.revoke", name, map[string]any{"shadowed": true})
		return a.served(&rec), nil
	}
	return a.change(r, actor, "key.revoke", revoke, nil)
}

func (a *API) enableKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	return a.change(r, actor, "key.enable", func(rec *keystore.Record) error { rec.Disabled = false; return nil }, nil)
}

func (a *API) disableKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	return a.change(r, actor, "key.disable", func(rec *keystore.Record) error { rec.Disabled = true; return nil }, nil)
}

// deleteKey removes a revoked key of the API from the store (one a key of
// the file shadows too), so that it no longer counts toward
// server.admin.max_keys; a key that is not revoked is refused (409).
func (a *API) deleteKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	name := r.PathValue("name")
	if _, err := a.o.Keys.Get(name); err != nil && a.fileKey(name) {
		return nil, a.apiOnly(name)
	}
	if err := a.o.Keys.Delete(r.Context(), name); err != nil {
		return nil, err
	}
	a.record(r.Context(), actor, "key.delete", name, nil)
	return map[string]any{"name": name, "deleted": true}, nil
}

// resetKey moves the key to new counters: its generation becomes the
// reset's time (keystore.NextGeneration), never one of an earlier life of
// its name, whose counters may still hold a count of the period.
func (a *API) resetKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	var gen int64
	now := a.o.Now()
	return a.change(r, actor, "key.reset", func(rec *keystore.Record) error {
		rec.Generation = keystore.NextGeneration(rec.Generation, now)
		gen = rec.Generation
		return nil
	}, map[string]any{"generation": &gen})
}

// rotateBody is the body of a rotation.
type rotateBody struct {
	// Overlap is how long the current secret keeps working ("24h"; "0s"
	// ends it at once). Default 24h.
	Overlap string `json:"overlap"`
}

// DefaultOverlap is how long the old secret of a rotation keeps working
// unless the call says otherwise.
const DefaultOverlap = 24 * time.Hour

func (a *API) rotateKey(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	name := r.PathValue("name")
	if err := a.apiOnly(name); err != nil {
		return nil, err
	}
	b := rotateBody{}
	if err := decodeOptional(r, &b); err != nil {
		return nil, err
	}
	overlap := DefaultOverlap
	if b.Overlap != "" {
		d, err := time.ParseDuration(b.Overlap)
		if err != nil || d < 0 || d > keystore.MaxOverlap {
			return nil, errorf(http.StatusBadRequest, "overlap: want a duration from 0s to %v such as 24h, got %q", keystore.MaxOverlap, b.Overlap)
		}
		overlap = d
	}
	raw, rec, err := a.o.Keys.Rotate(r.Context(), name, overlap)
	if err != nil {
		return nil, err
	}
	a.record(r.Context(), actor, "key.rotate", name, map[string]any{"overlap": overlap.String(), "sha256_prefix": rec.Secrets[0].SHA256[:12]})
	v := a.served(&rec)
	v.Secret = raw
	return v, nil
}

// Use is one limit's usage for one key.
type Use struct {
	Limit     string    `json:"limit"`
	Algorithm string    `json:"algorithm"`
	Key       string    `json:"key"`
	Capacity  int64     `json:"capacity"`
	Used      int64     `json:"used"`
	Left      int64     `json:"left"`
	ResetsAt  time.Time `json:"resets_at"`
	ResetIn   float64   `json:"reset_in_seconds"`
	Allowed   bool      `json:"allowed_now"`
	Degraded  bool      `json:"degraded,omitempty"`
}

// Peek reads one hit's state without charging it: Allowed says whether
// one request of the limit would pass now, costing what the gateway
// charges one (policy.Limit.DefaultCost).
func (a *API) Peek(ctx context.Context, l *policy.Limit, key string) (Use, error) {
	cost := l.DefaultCost()
	req := limiter.Request{Peek: true, Hits: []limiter.Hit{{Rule: l.Rule, Key: key, Cost: cost}}}
	var res limiter.Result
	if err := a.o.Engine.Decide(ctx, &req, &res); err != nil {
		return Use{}, err
	}
	d := res.Decisions[0]
	left := d.Remaining
	if d.Allowed {
		left += cost // a peek reports what would be left after this request
	}
	left = min(left, d.Limit)
	degraded := res.Degraded != limiter.NotDegraded
	resets := a.o.Now().UTC().Add(d.ResetAfter)
	if l.Rule.Algorithm() == floodgate.Quota && d.ResetAfter > 0 && !degraded {
		// The store measured ResetAfter on its clock; the calendar's
		// boundary is the same instant on every instance, whatever the
		// skew of this one's clock.
		lim := l.Rule.Limit()
		resets = time.Unix(0, algo.QuotaBoundary(&lim, resets.UnixNano())).UTC()
	}
	return Use{Limit: l.Name, Algorithm: l.Rule.Algorithm().String(), Key: key, Capacity: d.Limit,
		Used: d.Limit - left, Left: left, ResetsAt: resets.Truncate(time.Millisecond),
		ResetIn: d.ResetAfter.Seconds(), Allowed: d.Allowed, Degraded: degraded}, nil
}

// Resolve finds a key by name: the file's first, then the API's.
func (a *API) Resolve(name string) (*policy.Key, error) {
	p := a.o.Policy()
	if k, ok := p.FileKey(name); ok {
		return k, nil
	}
	rec, err := a.o.Keys.Get(name)
	if err != nil {
		return nil, err
	}
	return p.NewKey(rec.Name, rec.Plan, keystore.ServingOptions(&rec))
}

// KeyUsage returns the usage of each limit of the key's plan.
func (a *API) KeyUsage(ctx context.Context, name string) ([]Use, *policy.Key, error) {
	k, err := a.Resolve(name)
	if err != nil {
		return nil, nil, err
	}
	out := []Use{}
	rate, quota := k.Limits()
	for _, l := range []*policy.Limit{rate, quota} {
		if l == nil {
			continue
		}
		u, err := a.Peek(ctx, l, k.Counter())
		if err != nil {
			return nil, nil, err
		}
		out = append(out, u)
	}
	return out, k, nil
}

func (a *API) keyUsage(_ http.ResponseWriter, r *http.Request, _ string) (any, error) {
	uses, k, err := a.KeyUsage(r.Context(), r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	return map[string]any{"key": k.Name(), "plan": k.Plan(), "usage": uses}, nil
}

// usage peeks at any limit for any counter key: ?limit=NAME&key=KEY (the
// key as the limit counts it, such as ip:192.0.2.1 or key:acme).
func (a *API) usage(_ http.ResponseWriter, r *http.Request, _ string) (any, error) {
	name, key := r.URL.Query().Get("limit"), r.URL.Query().Get("key")
	if name == "" || key == "" {
		return nil, errorf(http.StatusBadRequest, "limit and key are required")
	}
	l, ok := a.o.Policy().Limit(name)
	if !ok {
		return nil, errorf(http.StatusNotFound, "no limit named %q", name)
	}
	return a.Peek(r.Context(), l, key)
}

// LimitView is a compiled limit as the API shows it.
type LimitView struct {
	Name      string   `json:"name"`
	Scope     string   `json:"scope"`
	Algorithm string   `json:"algorithm"`
	Kind      string   `json:"kind"`
	Key       string   `json:"key"`
	Match     string   `json:"match"`
	Cost      int64    `json:"cost"`
	Capacity  int64    `json:"capacity"`
	Rate      int64    `json:"rate,omitempty"`
	Per       string   `json:"per,omitempty"`
	Burst     int64    `json:"burst,omitempty"`
	Max       int64    `json:"limit,omitempty"`
	Window    string   `json:"window,omitempty"`
	Period    string   `json:"period,omitempty"`
	TimeZone  string   `json:"time_zone,omitempty"`
	OnFailure string   `json:"on_failure"`
	Shadow    bool     `json:"shadow,omitempty"`
	CountOn   []int    `json:"count_on,omitempty"`
	Plan      string   `json:"plan,omitempty"`
	RuleID    string   `json:"rule_id"`
	Params    []string `json:"params"`
}

func limitView(l *policy.Limit) LimitView {
	fl := l.Rule.Limit()
	v := LimitView{Name: l.Name, Scope: l.Scope, Algorithm: fl.Algorithm.String(), Kind: kindName(l.Kind), Key: l.KeyText(),
		Match: l.MatchText, Cost: l.Cost, Capacity: l.Rule.Capacity(), OnFailure: l.Rule.OnFailure().String(),
		Shadow: l.Shadow, CountOn: l.CountOn, Plan: l.Plan, RuleID: l.Rule.ID()}
	ps := fl.Algorithm.Traits().Params
	if ps.Has(floodgate.ParamRate) {
		v.Rate, v.Per = fl.Rate, fl.Per.String()
	}
	if ps.Has(floodgate.ParamBurst) {
		v.Burst = fl.Burst
	}
	if ps.Has(floodgate.ParamMax) {
		v.Max = fl.Max
	}
	if ps.Has(floodgate.ParamWindow) {
		v.Window = fl.Window.String()
	}
	if ps.Has(floodgate.ParamPeriod) {
		v.Period = fl.Period.String()
		if fl.Location != nil {
			v.TimeZone = fl.Location.String()
		}
	}
	v.Params = strings.Split(ps.String(), ", ")
	return v
}

func kindName(k floodgate.Kind) string {
	if s := k.String(); s != "" {
		return s
	}
	return strconv.Itoa(int(k))
}

func (a *API) limits(_ http.ResponseWriter, _ *http.Request, _ string) (any, error) {
	p := a.o.Policy()
	out := []LimitView{}
	for _, l := range p.Limits() {
		out = append(out, limitView(l))
	}
	return map[string]any{"version": p.Version(), "limits": out}, nil
}

func (a *API) plans(_ http.ResponseWriter, _ *http.Request, _ string) (any, error) {
	p := a.o.Policy()
	type planView struct {
		Name   string      `json:"name"`
		Routes []string    `json:"routes,omitempty"`
		Limits []LimitView `json:"limits"`
		Keys   int         `json:"keys"`
	}
	keys := map[string]int{}
	for _, k := range a.Keys() {
		if k.State == "active" {
			keys[k.Plan]++
		}
	}
	out := []planView{}
	for _, cp := range p.File().Plans {
		pv := planView{Name: cp.Name, Routes: cp.Routes, Limits: []LimitView{}, Keys: keys[cp.Name]}
		for _, l := range p.Limits() {
			if l.Scope == policy.ScopePlan && l.Plan == cp.Name {
				pv.Limits = append(pv.Limits, limitView(l))
			}
		}
		out = append(out, pv)
	}
	return map[string]any{"version": p.Version(), "plans": out}, nil
}

// limitParam reads a list's ?limit= (1 to 10000), def when there is none.
func limitParam(r *http.Request, def int) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 10000 {
		return 0, errorf(http.StatusBadRequest, "limit: want 1 to 10000")
	}
	return n, nil
}

func (a *API) audit(_ http.ResponseWriter, r *http.Request, _ string) (any, error) {
	q := Query{Target: r.URL.Query().Get("target"), Action: r.URL.Query().Get("action")}
	n, err := limitParam(r, 0)
	if err != nil {
		return nil, err
	}
	q.Limit = n
	if s := r.URL.Query().Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "since: want an RFC 3339 time")
		}
		q.Since = t
	}
	entries, err := a.o.Audit.List(r.Context(), q)
	if err != nil {
		return nil, err
	}
	if u, ok := a.o.Audit.(interface{ Unreadable() int }); ok {
		if n := u.Unreadable(); n > 0 {
			a.log.Warn("admin: audit lines skipped: they cannot be read", "lines", n)
		}
	}
	return map[string]any{"entries": entries}, nil
}
