package limiter

import (
	"sync"
	"sync/atomic"
)

// fixedSlots is the number of prepared forms a rule holds without a lock:
// enough for every consumer in this module.
const fixedSlots = 8

// Slot names one consumer's prepared form of rules: what a store, a front
// end or the engine works out once per rule (a store's script arguments,
// a rule's response fields), kept on the rule itself so that it lives
// exactly as long as the rule. A reload that replaces its rules frees
// their prepared forms with them: there is no cache to bound. Make one
// Slot per kind of prepared form, once (a package variable), with NewSlot.
// The zero Slot keeps nothing: Prepared builds afresh every time.
type Slot struct {
	n uint32 // 1 + the index of the slot
}

var slots atomic.Uint32

// NewSlot returns a Slot that no other NewSlot call returns. The first few
// are read without a lock; the others, under the rule's mutex.
func NewSlot() Slot { return Slot{n: slots.Add(1)} }

// prepared is one prepared form.
type prepared struct{ v any }

// preparedForms is the room for prepared forms in a Rule.
type preparedForms struct {
	fixed [fixedSlots]atomic.Pointer[prepared]
	mu    sync.Mutex // guards more
	more  map[uint32]any
}

// Prepared returns the rule's prepared form for slot s, building it with
// build the first time it is asked for. Prepared is safe for concurrent
// use: callers that ask at once may each run build, and all of them get
// the same value (the first one kept). build must not call Prepared for the
// same rule and slot. A hot path that asks for a form already built
// allocates nothing and takes no lock.
func (r *Rule) Prepared(s Slot, build func(*Rule) any) any {
	switch {
	case s.n == 0:
		return build(r)
	case s.n <= fixedSlots:
		p := &r.prepared.fixed[s.n-1]
		if f := p.Load(); f != nil {
			return f.v
		}
		f := &prepared{v: build(r)}
		if p.CompareAndSwap(nil, f) {
			return f.v
		}
		return p.Load().v
	}
	pf := &r.prepared
	pf.mu.Lock()
	v, ok := pf.more[s.n]
	pf.mu.Unlock()
	if ok {
		return v
	}
	v = build(r)
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if old, ok := pf.more[s.n]; ok {
		return old
	}
	if pf.more == nil {
		pf.more = make(map[uint32]any)
	}
	pf.more[s.n] = v
	return v
}
