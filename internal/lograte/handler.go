package lograte

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// HandlerOptions bound the lines a Handler lets through.
type HandlerOptions struct {
	// Burst is how many lines of one message (and level) pass in each
	// Window; the rest are held back. 0: 10.
	Burst int
	// Window is the time over which Burst lines of a message pass. 0: a
	// second.
	Window time.Duration
	// Messages bounds how many distinct messages are told apart; lines
	// of messages beyond it share one allowance. 0: 256.
	Messages int
	// Now reads the clock (time.Now when nil).
	Now func() time.Time
	// AfterFunc runs f after d (time.AfterFunc when nil): the end of a
	// window in which lines were held back.
	AfterFunc func(d time.Duration, f func())
}

// Handler is a slog.Handler that holds back, per message and level, the
// lines past Burst in a Window, so that lines a client can cause at will
// (an upstream that fails for each of its requests, a store out of reach
// for each decision) cannot flood the log: a flood of them costs Burst
// lines a Window whatever its rate, and one more at its end. The first
// line of a message to pass after some were held back says how many in
// its "not_logged_since" attribute; when none passes by the end of the
// window, the last line held back is written then, saying how many others
// were, so that no line is held back unseen (a burst of warnings at a
// reload, one per route). Debug lines, which an operator turns on to see
// each request, all pass. The allowance is shared by the handlers
// WithAttrs and WithGroup derive, and it is safe for concurrent use.
type Handler struct {
	next slog.Handler
	t    *table
}

// NewHandler returns a Handler that passes the lines it lets through to
// next.
func NewHandler(next slog.Handler, o HandlerOptions) *Handler {
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Window <= 0 {
		o.Window = time.Second
	}
	if o.Messages <= 0 {
		o.Messages = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AfterFunc == nil {
		o.AfterFunc = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	return &Handler{next: next, t: &table{o: o, m: make(map[lineKey]*window)}}
}

type table struct {
	o     HandlerOptions
	mu    sync.Mutex
	m     map[lineKey]*window
	other window // the messages past o.Messages
}

// maxKeyBytes bounds the text of a message a Handler keeps.
const maxKeyBytes = 128

type lineKey struct {
	level slog.Level
	msg   string
}

// window is a message's allowance: from start, n lines passed, held
// held back since the last line that passed, the last of them last (to
// be written through lastTo at the window's end unless a line passes
// before); flushing says that end is awaited.
type window struct {
	start    time.Time
	n        int
	held     int64
	last     slog.Record
	lastTo   slog.Handler
	flushing bool
}

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes r to next unless its message is past its allowance.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		return h.next.Handle(ctx, r)
	}
	msg := r.Message
	if len(msg) > maxKeyBytes {
		msg = msg[:maxKeyBytes] // a long message is told apart by its start
	}
	held, ok := h.t.pass(lineKey{r.Level, msg}, &r, h.next)
	if !ok {
		return nil
	}
	if held > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("not_logged_since", held))
	}
	return h.next.Handle(ctx, r)
}

// pass reports whether r, a line of k to be written through to, passes,
// and how many lines of k it is to say were held back.
func (t *table) pass(k lineKey, r *slog.Record, to slog.Handler) (held int64, ok bool) {
	now := t.o.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.m[k]
	if w == nil {
		if len(t.m) < t.o.Messages {
			w = &window{}
			k.msg = strings.Clone(k.msg)
			t.m[k] = w
		} else {
			w = &t.other
		}
	}
	if w.start.IsZero() || now.Sub(w.start) >= t.o.Window || now.Before(w.start) {
		w.start, w.n = now, 0
	}
	if w.n >= t.o.Burst {
		w.held++
		w.last, w.lastTo = r.Clone(), to
		if !w.flushing {
			w.flushing = true
			t.o.AfterFunc(w.start.Add(t.o.Window).Sub(now), func() { t.flush(w) })
		}
		return 0, false
	}
	w.n++
	held, w.held = w.held, 0
	w.last, w.lastTo = slog.Record{}, nil
	return held, true
}

// flush writes, at the end of w's window, the last line held back since a
// line of w passed, saying how many others were; it counts as a line of
// the window it is written in.
func (t *table) flush(w *window) {
	now := t.o.Now()
	t.mu.Lock()
	w.flushing = false
	if w.held == 0 {
		t.mu.Unlock()
		return
	}
	r, to, others := w.last, w.lastTo, w.held-1
	w.held, w.last, w.lastTo = 0, slog.Record{}, nil
	if now.Sub(w.start) >= t.o.Window || now.Before(w.start) {
		w.start, w.n = now, 0
	}
	w.n++
	t.mu.Unlock()
	if others > 0 {
		r.AddAttrs(slog.Int64("not_logged_since", others))
	}
	_ = to.Handle(context.Background(), r)
}

// WithAttrs returns a Handler for next.WithAttrs(attrs) sharing h's
// allowance.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), t: h.t}
}

// WithGroup returns a Handler for next.WithGroup(name) sharing h's
// allowance.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), t: h.t}
}
