package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
)

// CodeUnknownReservation answers a settle of a reservation the store does
// not hold: settled already, expired (it kept its estimate), or decided
// while the store failed.
const CodeUnknownReservation = "unknown_reservation"

// reservation is what a reservation token carries: the reservation's ID
// and the hits it reserved (limit, key, estimate), so that a settle needs
// nothing else. It grants nothing: a settle changes only a reservation
// the store holds under that ID.
type reservation struct {
	ID   string           `json:"id"`
	Hits []reservationHit `json:"hits"`
}

type reservationHit struct {
	Limit string `json:"l"`
	Key   string `json:"k"`
	Cost  int64  `json:"c"`
	// Rule is the ID of the rule the hit was reserved on, so that a
	// settle after reloads that changed the limit finds it at once. It is
	// read, not yet written: a version that writes it needs every
	// instance it shares reservations with to read it first.
	Rule string `json:"r,omitempty"`
}

// UnmarshalJSON reads a hit of a token, its limit and key decoded exactly
// (see unquote), as they were posted.
func (x *reservationHit) UnmarshalJSON(b []byte) error {
	var raw struct {
		Limit json.RawMessage `json:"l"`
		Key   json.RawMessage `json:"k"`
		Cost  int64           `json:"c"`
		Rule  json.RawMessage `json:"r"`
	}
	if err := decodePart(b, &raw); err != nil {
		return err
	}
	l, err := unquote(raw.Limit)
	if err != nil {
		return err
	}
	k, err := unquote(raw.Key)
	if err != nil {
		return err
	}
	var r string
	if raw.Rule != nil {
		if r, err = unquote(raw.Rule); err != nil {
			return err
		}
	}
	*x = reservationHit{Limit: l, Key: k, Cost: raw.Cost, Rule: r}
	return nil
}

// encode returns the reservation's token: its JSON in unpadded base64url.
func (r *reservation) encode() string {
	b, _ := json.Marshal(r)
	return base64.RawURLEncoding.EncodeToString(b)
}

// wireReserve is a posted /v1/reserve body: the hits as for /v1/check and
// how long to hold them.
type wireReserve struct {
	Hits []wireHit `json:"hits"`
	rawHit
	TTL json.RawMessage `json:"ttl"`
}

// reserve answers POST /v1/reserve: every hit's cost is an estimate,
// reserved all or nothing like a check, and held until POST /v1/settle
// names the reservation (or its ttl passes: it then keeps its estimate).
func (h *Handler) reserve(w http.ResponseWriter, r *http.Request, body []byte, _ bool) {
	var in wireReserve
	if err := decodeBody(body, &in, h.maxHits); err != nil {
		e := decodeError(err)
		writeError(w, e.status, e.code, e.msg, nil)
		return
	}
	one, err := in.hit()
	if err != nil {
		e := decodeError(err)
		writeError(w, e.status, e.code, e.msg, nil)
		return
	}
	ttl, asked := time.Duration(0), false
	if !isNull(in.TTL) {
		asked = true
		raw := bytes.TrimSpace(in.TTL)
		if !isNumber(raw) {
			writeError(w, http.StatusBadRequest, CodeBadJSON, fmt.Sprintf("invalid JSON: ttl %s is not a JSON number of seconds", raw), nil)
			return
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || !(f > 0) || f > floodgate.MaxReservationTTL.Seconds() {
			writeError(w, http.StatusBadRequest, CodeBadRequest,
				fmt.Sprintf("ttl %s: want seconds above 0, at most %.0f", raw, floodgate.MaxReservationTTL.Seconds()), nil)
			return
		}
		ttl = time.Duration(math.Ceil(f*1000)) * time.Millisecond // whole milliseconds, rounded up
	}
	single := one.Limit != nil || one.Key != nil || one.Cost != nil
	wh := in.Hits
	switch {
	case in.Hits != nil && single:
		writeError(w, http.StatusBadRequest, CodeBadRequest, `give either "hits" or one hit's "limit", "key" and "cost", not both`, nil)
		return
	case single:
		wh = []wireHit{one}
	}
	q, apiErr := h.query(wh, true, false)
	if apiErr != nil {
		writeError(w, apiErr.status, apiErr.code, apiErr.msg, apiErr.extra)
		return
	}
	if !asked {
		// The limits' reserve_ttl, as the gateway holds a reservation
		// of them.
		ttl = q.ttl
		if ttl <= 0 {
			ttl = floodgate.DefaultReservationTTL
		}
	}
	if name, lease, ok := shortestLease(q); ok && ttl > lease {
		if asked {
			writeError(w, http.StatusBadRequest, CodeBadRequest,
				fmt.Sprintf("ttl %s: longer than the lease_ttl %v of the concurrency limit %q, which frees its slot then; ask for at most %g seconds",
					bytes.TrimSpace(in.TTL), lease, name, lease.Seconds()), nil)
			return
		}
		ttl = lease
	}
	for i := range q.hits {
		q.hits[i].Reserve = true
	}
	req := limiter.Request{Front: limiter.FrontHTTPAPI, Hits: q.hits, TTL: ttl}
	var res limiter.Result
	err = h.eng.Decide(r.Context(), &req, &res)
	if r.Context().Err() != nil && req.Reservation != 0 && (err != nil || res.Allowed && res.Degraded == limiter.NotDegraded) {
		// The caller left before its answer: no one holds the token
		// that would settle the reservation (a store call the caller
		// gave up on may have made it too).
		h.giveBack(r.Context(), &req)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the caller left before its answer: the reservation was given back", nil)
		return
	}
	if err != nil {
		h.engineError(w, err)
		return
	}
	rsv := &reservation{ID: strconv.FormatUint(req.Reservation, 16), Hits: make([]reservationHit, len(q.hits))}
	for i := range q.hits {
		// The token does not name its rule yet (Rule): an instance of an
		// earlier version refuses a token with a field it does not know,
		// and during a rolling upgrade it may be asked to settle one.
		rsv.Hits[i] = reservationHit{Limit: q.names[i], Key: keyOf(wh[i]), Cost: q.hits[i].Cost}
	}
	if res.Allowed {
		h.reserved(q, time.Now().Add(ttl))
	}
	h.answer(w, false, q, &res, rsv)
}

// giveBack cancels the reservation req made for a caller that left
// before its answer, so that it does not hold its estimates, and its
// concurrency slots, until its ttl. One the store never made changes
// nothing.
func (h *Handler) giveBack(ctx context.Context, req *limiter.Request) {
	ctx, cancel := detached(ctx)
	defer cancel()
	var res limiter.Result
	err := h.eng.Settle(ctx, req, make([]int64, len(req.Hits)), &res)
	if err != nil && !errors.Is(err, limiter.ErrReservationUnknown) {
		h.log.Warn("httpapi: giving back the reservation of a caller that left", "err", err)
	}
}

// shortestLease returns the shortest lease lifetime among the concurrency
// limits of q, and that limit's name as posted; false when q has none.
// Nothing renews the lease of a reservation, so it frees its slot once
// its lease_ttl passes: a reservation may not outlive it, or it would
// still be settled as held while another caller has the slot.
func shortestLease(q *query) (name string, lease time.Duration, ok bool) {
	for i, h := range q.hits {
		if h.Rule.Algorithm().Kind() != floodgate.KindConcurrency {
			continue
		}
		d := h.Rule.Limit().LeaseTTL
		if d <= 0 {
			d = algo.DefaultLeaseTTL
		}
		if !ok || d < lease {
			name, lease, ok = q.names[i], d, true
		}
	}
	return name, lease, ok
}

// keyOf is the key a hit was posted with (the engine may hash a long one
// in place).
func keyOf(x wireHit) string {
	if x.Key == nil {
		return ""
	}
	return *x.Key
}

// engineError answers an error of the engine.
func (h *Handler) engineError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, floodgate.ErrNeverFits):
		writeError(w, http.StatusUnprocessableEntity, CodeNeverFits, err.Error(), nil)
	case errors.Is(err, limiter.ErrReservationUnknown):
		writeError(w, http.StatusNotFound, CodeUnknownReservation,
			"no such reservation: settled already, expired (it kept its estimate), or made while the store failed", nil)
	default:
		h.log.Warn("httpapi: engine", "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the limiter cannot decide now", nil)
	}
}

// wireSettle is a posted /v1/settle body.
type wireSettle struct {
	// Reservation is the token /v1/reserve answered.
	Reservation string `json:"reservation"`
	// Actual is the real cost: one number for every hit, or an object of
	// limit names and numbers (limits not named keep their estimate).
	Actual json.RawMessage `json:"actual"`
	// Cancel gives every hit back (an actual cost of 0).
	Cancel bool `json:"cancel"`
}

// SettleDecision is one hit's state after a settle.
type SettleDecision struct {
	Limit     string `json:"limit"`
	Key       string `json:"key"`
	Capacity  int64  `json:"capacity"`
	Remaining int64  `json:"remaining"`
	// Overrun is the part of the actual cost above the estimate that the
	// limit could not take: it ran out.
	Overrun int64 `json:"overrun,omitempty"`
}

// SettleResponse is the answer to a settle.
type SettleResponse struct {
	Settled bool `json:"settled"`
	// Overrun adds up the hits' overruns, held at the largest int64.
	Overrun   int64            `json:"overrun"`
	Decisions []SettleDecision `json:"decisions"`
}

// settle answers POST /v1/settle: the reservation named by the token ends
// with the actual costs (below the estimate the rest is given back, above
// it the excess is charged as far as each limit allows and the rest is
// reported as overrun). The same settle sent again within
// limiter.SettledTTL is answered as the first was; a second settle of the
// same reservation at other costs is 404 unknown_reservation. A settle read whole is applied even when its
// caller leaves before the answer.
func (h *Handler) settle(w http.ResponseWriter, r *http.Request, body []byte, _ bool) {
	var in wireSettle
	if err := decodeBody(body, &in, h.maxHits); err != nil {
		e := decodeError(err)
		writeError(w, e.status, e.code, e.msg, nil)
		return
	}
	rsv, id, apiErr := h.decodeReservation(in.Reservation)
	if apiErr != nil {
		writeError(w, apiErr.status, apiErr.code, apiErr.msg, apiErr.extra)
		return
	}
	q, apiErr := h.query(rsv, true, true)
	if apiErr != nil {
		writeError(w, apiErr.status, apiErr.code, apiErr.msg, apiErr.extra)
		return
	}
	actual := make([]int64, len(q.hits))
	for i := range q.hits {
		q.hits[i].Reserve = true
		actual[i] = q.hits[i].Cost
	}
	if apiErr := readActual(&in, q.names, actual); apiErr != nil {
		writeError(w, apiErr.status, apiErr.code, apiErr.msg, apiErr.extra)
		return
	}
	req := limiter.Request{Front: limiter.FrontHTTPAPI, Hits: q.hits, Reservation: id}
	var res limiter.Result
	// A settle is applied whether or not its caller stays for the answer:
	// one dropped because the caller left would hold the estimate until
	// the ttl.
	ctx, cancel := detached(r.Context())
	defer cancel()
	err := h.eng.Settle(ctx, &req, actual, &res)
	if errors.Is(err, limiter.ErrReservationUnknown) {
		err = h.settleReplaced(ctx, q, rsv, &req, actual, &res)
	}
	if err != nil {
		h.engineError(w, err)
		return
	}
	out := SettleResponse{Settled: true, Decisions: make([]SettleDecision, len(q.hits))}
	for i := range q.hits {
		d := res.Decisions[i]
		out.Decisions[i] = SettleDecision{Limit: q.names[i], Key: keyOf(rsv[i]), Capacity: d.Limit, Remaining: d.Remaining, Overrun: d.Overrun}
		out.Overrun = addOverrun(out.Overrun, d.Overrun)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(&out)
}

// settleReplaced settles req, which the store did not find on the
// current rules of its limits, on the rules reloads replaced, the most
// recent first, as the gateway settles a request in flight across a
// reload on the rules it reserved on (a changed limit counts afresh, so
// the reservation holds its estimate on the rule it was made on). It
// returns ErrReservationUnknown when none holds it. A try that finds
// nothing changes nothing (on Redis, each hit found is settled, and the
// same settle sent again is answered alike). Only hits of a token that
// names no rule (one made before tokens named them) are tried on other
// rules: query found the others' rule already.
func (h *Handler) settleReplaced(ctx context.Context, q *query, wh []wireHit, req *limiter.Request, actual []int64, res *limiter.Result) error {
	current := make([]*limiter.Rule, len(req.Hits))
	replaced := make([][]*limiter.Rule, len(req.Hits))
	tries := 0
	for i := range req.Hits {
		current[i] = req.Hits[i].Rule
		if wh[i].rule == "" {
			replaced[i] = h.replaced(q.names[i])
		}
		tries = max(tries, len(replaced[i]))
	}
	err := fmt.Errorf("httpapi: settle: %w", limiter.ErrReservationUnknown)
	for k := range tries {
		changed := false
		for i := range req.Hits {
			req.Hits[i].Rule = current[i]
			if k < len(replaced[i]) && replaced[i][k].ID() != current[i].ID() {
				req.Hits[i].Rule, changed = replaced[i][k], true
			}
		}
		if !changed {
			continue
		}
		if err = h.eng.Settle(ctx, req, actual, res); !errors.Is(err, limiter.ErrReservationUnknown) {
			return err
		}
	}
	return err
}

// detachedTimeout bounds what is done for a caller after it may have
// left: as long as Serve gives an answer to be written.
const detachedTimeout = 10 * time.Second

// detached returns a context that does not end when the caller leaves
// (ctx is its request's), ending at detachedTimeout instead; the engine's
// store deadline applies within it.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), detachedTimeout)
}

// addOverrun adds two overruns (each 0 or more), held at math.MaxInt64
// rather than wrapping below zero: actual costs near the int64 bound on
// several hits overrun by more than an int64 holds.
func addOverrun(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// maxTokenBytes caps a reservation token.
const maxTokenBytes = 48 << 10

// decodeReservation reads a reservation token into the hits it names
// (their posted form) and its ID.
func (h *Handler) decodeReservation(tok string) ([]wireHit, uint64, *apiError) {
	badTok := bad(http.StatusBadRequest, CodeBadRequest, `"reservation" is not a token /v1/reserve answered`)
	if tok == "" || len(tok) > maxTokenBytes {
		return nil, 0, badTok
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, 0, badTok
	}
	var rsv reservation
	if err := decodeBody(raw, &rsv, h.maxHits); err != nil {
		return nil, 0, badTok
	}
	id, err := strconv.ParseUint(rsv.ID, 16, 64)
	if err != nil || id == 0 || len(rsv.Hits) == 0 {
		return nil, 0, badTok
	}
	wh := make([]wireHit, len(rsv.Hits))
	for i := range rsv.Hits {
		x := &rsv.Hits[i]
		wh[i] = wireHit{Limit: &x.Limit, Key: &x.Key, Cost: &x.Cost, rule: x.Rule}
	}
	return wh, id, nil
}

// readActual fills actual from a settle's "actual" or "cancel".
func readActual(in *wireSettle, names []string, actual []int64) *apiError {
	whole := func(n json.Number) (int64, *apiError) {
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || v < 0 {
			return 0, bad(http.StatusBadRequest, CodeInvalidCost, "actual cost %s: a whole number of units, 0 or more", n.String())
		}
		return v, nil
	}
	if in.Cancel {
		if len(in.Actual) > 0 {
			return bad(http.StatusBadRequest, CodeBadRequest, `give either "actual" or "cancel", not both`)
		}
		clear(actual)
		return nil
	}
	if len(in.Actual) == 0 {
		return bad(http.StatusBadRequest, CodeBadRequest, `give "actual" (a number, or limit names and numbers) or "cancel": true`)
	}
	if i := invalidUTF8(in.Actual); i >= 0 {
		return bad(http.StatusBadRequest, CodeBadRequest, "actual: not valid UTF-8 (byte %#02x at offset %d)", in.Actual[i], i)
	}
	var v any
	if err := decodePart(in.Actual, &v); err != nil {
		return bad(http.StatusBadRequest, CodeBadJSON, "actual: %v", err)
	}
	switch v := v.(type) {
	case json.Number:
		n, e := whole(v)
		if e != nil {
			return e
		}
		for i := range actual {
			actual[i] = n
		}
	case map[string]any:
		for name, x := range v {
			num, ok := x.(json.Number)
			if !ok {
				return bad(http.StatusBadRequest, CodeInvalidCost, "actual cost of %q is not a number", name)
			}
			n, e := whole(num)
			if e != nil {
				return e
			}
			found := false
			for i := range names {
				if names[i] == name {
					actual[i], found = n, true
				}
			}
			if !found {
				return bad(http.StatusBadRequest, CodeBadRequest, "actual cost of %q: the reservation has no such limit", name)
			}
		}
	default:
		return bad(http.StatusBadRequest, CodeBadRequest, "actual: a number, or an object of limit names and numbers")
	}
	return nil
}
