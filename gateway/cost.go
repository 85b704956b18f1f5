package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Costs known from the request or the response (policy.Cost): a limit's
// estimate is read before the request is checked, from a header or a JSON
// field of the request body; a limit whose cost is known only afterwards
// (policy.Cost.Actual, or count_on) has its estimate reserved while the
// request is in flight, and settled once the response tells the real cost
// (a header, a JSON field of the body, or of the last event of a
// Server-Sent Events stream that carries it) or its status says whether
// it counts.

const (
	// maxCostBody caps the bytes of a request body read for an estimate,
	// and of a JSON response body (not a stream) read for an actual cost.
	// Past it the estimate is the limit's default, and the actual cost is
	// unknown (the estimate is kept). The body itself passes whole.
	maxCostBody = 1 << 20
	// maxEventBytes caps one Server-Sent Event read for an actual cost:
	// a longer event passes through unread.
	maxEventBytes = 1 << 20
)

// costs returns where hit i's cost is read (nil: fixed).
func (m *Match) costs(i int) *policy.Cost {
	if i < len(m.Costs) {
		return m.Costs[i]
	}
	return nil
}

// reserves reports whether hit i is reserved while the request is in
// flight: its cost is settled after the response.
func (m *Match) reserves(i int) bool {
	c := m.costs(i)
	return len(m.countOn(i)) > 0 || (c != nil && c.Actual != nil)
}

// estimate sets the cost of every hit whose limit reads it from the
// request (a header or a JSON field of the body), marks the hits whose
// cost is settled after the response as reservations, and sets the
// reservation's TTL. An estimate is at least 1 and at most the limit's
// capacity: it is a guess, which the settle corrects.
func (g *Gateway) estimate(x Exchange, st *Flow) {
	m := &st.m
	st.req.TTL = 0
	for i := range m.Hits {
		h := &m.Hits[i]
		h.Reserve = m.reserves(i)
		c := m.costs(i)
		if c == nil {
			continue
		}
		if h.Reserve {
			st.req.TTL = max(st.req.TTL, c.TTL)
		}
		if c.Estimate == nil {
			continue
		}
		v, ok := int64(0), false
		if name := c.Estimate.Header; name != "" {
			v, ok = headerInt(st.view.Header, name)
		} else if body := st.requestBody(x); body != nil {
			v, ok = jsonInt(body, c.Estimate.Body)
		}
		if !ok || v < 1 {
			v = c.Default
		}
		h.Cost = min(max(v, 1), h.Rule.Capacity())
	}
}

// requestBody returns the request's body for estimates, reading it once
// (up to maxCostBody) and putting it back for the upstream. It returns nil
// for no body or one too large to read.
func (st *Flow) requestBody(x Exchange) []byte {
	if !st.bodyRead {
		st.bodyRead = true
		st.body = x.RequestBody(maxCostBody)
	}
	return st.body
}

// Getter reads header fields: http.Header, and each engine's views.
type Getter interface {
	Get(name string) string
}

// headerInt reads a whole number from the first value of a header.
func headerInt(h Getter, name string) (int64, bool) {
	if h == nil {
		return 0, false
	}
	v := h.Get(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n, err == nil
}

// jsonInt reads the whole number at path in a JSON document: a number
// without a fraction (12 or 12.0), not negative.
func jsonInt(doc []byte, path []string) (int64, bool) {
	if len(path) == 0 || !bytes.Contains(doc, []byte(path[0])) {
		return 0, false // spares decoding most documents
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, false
	}
	for _, name := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		if v, ok = obj[name]; !ok {
			return 0, false
		}
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if n, err := num.Int64(); err == nil {
		if n < 0 {
			return 0, false
		}
		return n, true
	}
	f, err := num.Float64()
	if err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return 0, false
	}
	return int64(f), true
}

// Recorder watches the response of a request with reservations, for
// any engine: it remembers the upstream's status, reads the actual costs
// the response tells as it passes (without holding back any of it), and
// notes how the answer ended. What it notes decides the charge (see
// actualCosts): a reservation is given back in full only when no
// upstream answer began.
type Recorder struct {
	st  *Flow
	hdr Getter // the response's header fields, once known
	// status is the upstream's final status (0: no answer yet).
	status int
	// noAnswer says that no upstream answer began: the upstream could not
	// be reached, failed or timed out before its status line, or the
	// request never went ahead (a queued client left).
	noAnswer bool
	// complete says that the upstream's answer was read to its end:
	// passed to the client whole, or read on after the client left.
	complete bool
	// gone says that the client left before the answer was written.
	gone bool
	// ownEnd says that the status is the call's own end after its client
	// left (ClientLeft), not an answer of the upstream's.
	ownEnd  bool
	started bool // the response's headers are known
	stream  bool // a text/event-stream body
	skip    bool // the body is not read
	buf     []byte
	sse     sseScanner
	// values holds each hit's actual cost once the response told it;
	// found says which were told.
	values []int64
	found  []bool
	// bodyHits lists the hits whose actual cost is in the body.
	bodyHits []int
	// g, when set, settles the hits counted by outcome as soon as the
	// upstream's status is known (Gateway.settleStatus), under ctx, the
	// request's; nil leaves every hit to the settle at the request's end.
	g   *Gateway
	ctx context.Context
}

// Recorder returns st's recorder, reset for its request.
func (st *Flow) Recorder() *Recorder {
	n := len(st.m.Hits)
	rec := &st.rec
	*rec = Recorder{st: st, buf: rec.buf[:0], sse: sseScanner{line: rec.sse.line[:0], data: rec.sse.data[:0]},
		values: slices.Grow(rec.values[:0], n)[:n], found: slices.Grow(rec.found[:0], n)[:n], bodyHits: rec.bodyHits[:0]}
	clear(rec.values)
	clear(rec.found)
	for i := range st.m.Hits {
		if c := st.m.costs(i); c != nil && c.Actual != nil && c.Actual.Body != nil {
			rec.bodyHits = append(rec.bodyHits, i)
		}
	}
	rec.skip = len(rec.bodyHits) == 0
	rec.sse.onEvent = rec.event
	return rec
}

// keepBytes is the most buffer space a pooled Recorder keeps: a large
// body or event read once is not held for later requests.
const keepBytes = 64 << 10

// release drops what the recorder holds of its request, before its
// Flow goes back to the pool.
func (c *Recorder) release() {
	c.st, c.hdr, c.g, c.ctx = nil, nil, nil, nil
	if cap(c.buf) > keepBytes {
		c.buf = nil
	}
	if cap(c.sse.line) > keepBytes {
		c.sse.line = nil
	}
	if cap(c.sse.data) > keepBytes {
		c.sse.data = nil
	}
}

// header tells the recorder the response's status and header fields: the
// first final status counts (1xx answers are interim), and settles the
// hits it decides (Gateway.settleStatus).
func (c *Recorder) header(code int, h Getter) {
	c.hdr = h
	if c.status == 0 && code >= 200 {
		c.status = code
		c.start()
		if c.g != nil {
			c.g.settleStatus(c.ctx, c.st)
		}
	}
}

// start reads what the response headers tell, once.
func (c *Recorder) start() {
	if c.started || c.hdr == nil {
		return
	}
	c.started = true
	h := c.hdr
	for i := range c.st.m.Hits {
		if cs := c.st.m.costs(i); cs != nil && cs.Actual != nil && cs.Actual.Header != "" {
			c.values[i], c.found[i] = headerInt(h, cs.Actual.Header)
			c.found[i] = c.found[i] && c.values[i] >= 0
		}
	}
	if c.skip {
		return
	}
	if ct, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && ct == "text/event-stream" {
		c.stream = true
	}
	if ce := h.Get("Content-Encoding"); ce != "" && ce != "identity" {
		c.skip = true // compressed: not read
	}
}

// read looks at a part of the body as it passes.
func (c *Recorder) read(b []byte) {
	if c.skip || len(b) == 0 {
		return
	}
	if c.stream {
		c.sse.write(b)
		return
	}
	if len(c.buf)+len(b) > maxCostBody {
		c.skip, c.buf = true, c.buf[:0]
		return
	}
	c.buf = append(c.buf, b...)
}

// finish reads the actual costs of a JSON body once it has passed, or
// what came of it when it was cut short: a whole document before the cut
// told its cost (actualCosts keeps at least the estimate then), and a
// document cut in two tells none.
func (c *Recorder) finish() {
	if !c.started && c.complete {
		c.start() // the handler set headers and wrote nothing
	}
	if c.skip || c.stream || len(c.buf) == 0 {
		return
	}
	c.event(c.buf)
}

// readsBody reports whether the rest of a successful answer is worth
// reading after the client left: a hit's actual cost may still come in
// the body.
func (c *Recorder) readsBody() bool {
	return !c.skip && !c.noAnswer && c.status >= 200 && c.status <= 299
}

// event reads the actual costs from one JSON document: a body, or the
// data of one event of a stream (the last that tells a cost wins).
func (c *Recorder) event(doc []byte) {
	for _, i := range c.bodyHits {
		if v, ok := jsonInt(doc, c.st.m.costs(i).Actual.Body); ok {
			c.values[i], c.found[i] = v, true
		}
	}
}

// ClientLeft notes that the status the recorder is given is the call's
// own end once its client left (a gRPC handler that returned its
// context's error, CANCELLED or DEADLINE_EXCEEDED), not an answer of the
// upstream's: a hit counted by outcome counts that status, and a hit
// charged by its actual cost pays what the answer told, else its
// estimate, as for a handler that wrote nothing once its client left.
func (c *Recorder) ClientLeft() { c.ownEnd = true }

// actualCosts fills st.actual with the real cost of each reserved hit, by
// the outcome of the request: status is the answer's (rec, when not nil,
// also tells how the answer ended and the costs it carried).
//
//   - No upstream answer began (the upstream could not be reached, or
//     failed or timed out before its status line; the request never went
//     ahead): every reservation is given back.
//   - The upstream's status is known: a hit counted by outcome costs its
//     cost when its list has the status and 0 otherwise, whatever the
//     client did next.
//   - A hit whose actual cost the response tells: an answer that is not
//     a success (2xx) costs nothing, unless it is the call's own end once
//     its client left (Recorder.ClientLeft); a cost told in a header, or in a body
//     read to its end, is the actual cost; else the estimate stays, or
//     what the body told before it was cut short if that is more: never
//     less than what was observed.
func (st *Flow) actualCosts(status int, rec *Recorder) {
	m := &st.m
	st.actual = slices.Grow(st.actual[:0], len(m.Hits))[:len(m.Hits)]
	none := rec != nil && (rec.noAnswer || rec.status == 0 && !rec.complete)
	for i := range m.Hits {
		h := &m.Hits[i]
		st.actual[i] = 0
		c := m.costs(i)
		switch {
		case !h.Reserve || none:
		case len(m.countOn(i)) > 0:
			if slices.Contains(m.countOn(i), status) {
				st.actual[i] = h.Cost
			}
		case c != nil && c.Actual != nil && (status < 200 || status > 299) && (rec == nil || !rec.ownEnd):
		case rec != nil && rec.found[i] && (rec.complete || c.Actual.Body == nil):
			st.actual[i] = rec.values[i]
		case rec != nil && rec.found[i]:
			st.actual[i] = max(h.Cost, rec.values[i])
		default:
			st.actual[i] = h.Cost
		}
	}
}

// settle ends the request's reservation with the costs of its outcome
// (see actualCosts). A reservation decided by failure policies while the
// store failed holds nothing to settle.
func (g *Gateway) settle(ctx context.Context, st *Flow, status int, rec *Recorder) {
	if rec != nil {
		rec.finish()
		status = rec.status
		if status == 0 {
			status = http.StatusOK // the handler wrote nothing
		}
	}
	if st.res.Degraded != limiter.NotDegraded {
		return
	}
	st.actualCosts(status, rec)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
	defer cancel()
	if err := g.engine.Settle(cctx, &st.req, st.actual, &st.settled); err != nil {
		level := "error"
		if errors.Is(err, limiter.ErrReservationUnknown) {
			level = "expired" // held past its TTL: it kept its estimate
		}
		g.log.Warn("gateway: settle", "err", err, "route", st.m.Route, "problem", level)
	}
}

// byStatus reports whether hit i of st, when reserved, is settled as soon
// as the upstream's status is known: a hit counted by outcome (count_on),
// whose charge the status alone decides, other than a concurrency slot,
// which is held until the request ends (the upstream still works on it)
// and given back by the settle at its end.
func (st *Flow) byStatus(i int) bool {
	return len(st.m.countOn(i)) > 0 && st.m.Hits[i].Rule.Algorithm().Kind() != floodgate.KindConcurrency
}

// settleStatus settles the reserved hits of st that the upstream's status
// decides (byStatus) once it is known, not when the answer ends: an
// answer that streams on (an event stream, a long poll, a tunnel) is no
// attempt in flight any more, so it holds no reservation for other
// requests to meet, and none that would outlive its TTL and so be charged
// at its estimate whatever the status. Those hits are then no longer
// reserved, and the settle at the request's end (finish) settles the
// others. A status the gateway gave for an upstream that gave none
// (Recorder.noAnswer) is left to that settle.
func (g *Gateway) settleStatus(ctx context.Context, st *Flow) {
	rec := &st.rec
	if rec.noAnswer || st.res.Degraded != limiter.NotDegraded {
		return
	}
	hits := st.m.Hits
	early := false
	for i := range hits {
		early = early || hits[i].Reserve && st.byStatus(i)
	}
	if !early {
		return
	}
	// The other reserved hits are left out of this settle (Settle settles
	// only the hits marked Reserve), and marked again after it.
	for i := range hits {
		if !st.byStatus(i) {
			hits[i].Reserve = false
		}
	}
	st.actualCosts(rec.status, rec)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
	err := g.engine.Settle(cctx, &st.req, st.actual, &st.settled)
	cancel()
	for i := range hits {
		hits[i].Reserve = st.m.reserves(i) && !st.byStatus(i)
	}
	if err != nil {
		level := "error"
		if errors.Is(err, limiter.ErrReservationUnknown) {
			level = "expired" // held past its TTL: it kept its estimate
		}
		g.log.Warn("gateway: settle", "err", err, "route", st.m.Route, "problem", level)
	}
}

// sseScanner reads a Server-Sent Events stream as it passes, one event at
// a time, keeping only the event being read (at most maxEventBytes): the
// stream itself is never held back.
type sseScanner struct {
	line      []byte // an unfinished line
	data      []byte // the current event's data lines
	longLine  bool   // the current line is over the cap: skipped
	longEvent bool   // the current event is over the cap: not read
	cr        bool   // the last byte seen was a CR (a CRLF may follow)
	onEvent   func(data []byte)
	maxBytes  int // 0: maxEventBytes
}

func (s *sseScanner) limit() int {
	if s.maxBytes > 0 {
		return s.maxBytes
	}
	return maxEventBytes
}

// write reads the next part of the stream.
func (s *sseScanner) write(b []byte) {
	if s.cr && len(b) > 0 && b[0] == '\n' {
		b = b[1:]
	}
	s.cr = false
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			if s.longLine || len(s.line)+len(b) > s.limit() {
				s.longLine, s.line = true, s.line[:0]
			} else {
				s.line = append(s.line, b...)
			}
			return
		}
		switch {
		case s.longLine || len(s.line)+i > s.limit():
			s.longLine, s.longEvent = false, true
		case len(s.line) > 0:
			s.line = append(s.line, b[:i]...)
			s.field(s.line)
		default:
			s.field(b[:i])
		}
		s.line = s.line[:0]
		if b[i] == '\r' {
			if i+1 == len(b) {
				s.cr = true
			} else if b[i+1] == '\n' {
				i++
			}
		}
		b = b[i+1:]
	}
}

// field handles one complete line.
func (s *sseScanner) field(line []byte) {
	if len(line) == 0 {
		if !s.longEvent && len(s.data) > 0 && s.onEvent != nil {
			s.onEvent(s.data[:len(s.data)-1])
		}
		s.data, s.longEvent = s.data[:0], false
		return
	}
	if s.longEvent {
		return
	}
	v, ok := bytes.CutPrefix(line, []byte("data"))
	if !ok || (len(v) > 0 && v[0] != ':') {
		return // another field, a comment, or "database:"
	}
	if len(v) > 0 {
		v = v[1:]
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
	}
	if len(s.data)+len(v)+1 > s.limit() {
		s.longEvent, s.data = true, s.data[:0]
		return
	}
	s.data = append(s.data, v...)
	s.data = append(s.data, '\n')
}

// refundHits returns the hits of st to refund: those that are not
// reservations (a reservation is given back by its settle), each naming
// where the store counted its charge (limiter.Hit.Mark, from its
// decision), so that a window's, a log's or a quota's charge comes back
// too; a hit decided by its failure policy names none. It reuses the
// storage of st.leases past its length, which it leaves as it is.
func refundHits(st *Flow) []limiter.Hit {
	hits := st.leases[len(st.leases):]
	reserved := st.req.HasReserved()
	for i, h := range st.m.Hits {
		if reserved && h.Reserve {
			continue
		}
		h.Mark = 0
		if i < len(st.res.Decisions) && i < len(st.res.Flags) && st.res.Flags[i]&limiter.Degraded == 0 {
			h.Mark = st.res.Decisions[i].Mark
		}
		hits = append(hits, h)
	}
	return hits
}

// cancelReservation gives the whole reservation of st back: the request
// never went ahead.
func (g *Gateway) cancelReservation(ctx context.Context, st *Flow) {
	rec := st.Recorder()
	rec.noAnswer = true
	g.settle(ctx, st, 0, rec)
}
