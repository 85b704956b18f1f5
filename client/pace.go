package client

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// PacerOptions configure a Pacer. The zero value is usable.
type PacerOptions struct {
	// MaxKeys bounds the hosts (or PaceKey values) whose quotas are
	// remembered; past it the least recently used that holds nothing
	// back is forgotten (the least recently used of all only when every
	// key holds requests back or has some in flight). Zero
	// means 1024.
	MaxKeys int
	// MaxHold is the longest a request is held. When the server's quota
	// is back only later than that, the request is not sent and fails at
	// once with a *HoldError; so does a request held for answers in
	// flight that have not come after MaxHold. Zero means 60s.
	MaxHold time.Duration
}

// Pacer holds requests back before they are sent, while a server has
// said that nothing is left, until its quota is back. It learns from the
// answers: the RateLimit and RateLimit-Policy fields
// (draft-ietf-httpapi-ratelimit-headers: "name";r=0;t=5 and
// "name";q=100;w=60), the Retry-After of a 429 or 503, and over gRPC the
// same fields as metadata and a google.rpc.RetryInfo detail (fields of an
// answer from a cache, Age above 0, are ignored, as the draft asks).
//
// A Pacer is shared by every request that goes through it: give the same
// one to every RetryTransport and RetryInterceptor that calls the same
// servers. It keeps its state per key (the request's host by default)
// and per policy name, for at most MaxKeys keys and 16 policies a key,
// and it is safe for concurrent use.
//
// For each policy, a request goes while the remaining units of the
// answers exceed the requests in flight; it waits for answers in flight
// when those may take the last units (or until the policy's quota
// refills a unit, when that comes first), and until the reset (t, or the
// Retry-After of a refusal, which wins over t) when the server said none
// remain. Answers may come back in any order, so until the reset the
// lowest remaining count wins. After the reset the Pacer assumes one
// unit, plus what the policy's quota (q over w) refills since then, until
// an answer says how many. Because t is in whole seconds, a token bucket
// whose rate a second exceeds its burst is paced to about its burst a
// second.
//
// A Retry-After (or RetryInfo) of a refusal that names no used-up policy
// holds back every request to the key. When it ends, one request goes
// to find out, and each answer the server accepts lets one more be in
// flight (a new such refusal starts again from one), until 64 are, so
// that the requests it held do not all go at once into the same refusal.
//
// A policy holds back the kinds of requests (method and path, or gRPC
// method; up to 64 a key) whose answers named it, and kinds not answered
// yet, but not kinds whose answers never named it: a used-up login limit
// does not hold back the other routes of the host.
//
// A held request never waits past its context's deadline: when the quota
// is back only after it, the request fails at once with a *HoldError
// that wraps context.DeadlineExceeded.
type Pacer struct {
	maxKeys int
	maxHold time.Duration
	seed    maphash.Seed

	held      atomic.Int64
	heldNanos atomic.Int64
	refused   atomic.Int64

	mu   sync.Mutex // guards seq, keys, lru and every paceKey
	seq  uint64     // the last ticket number given
	keys map[string]*paceKey
	lru  list.List // of *paceKey, most recently used first
}

// PacerStats count what a Pacer held back.
type PacerStats struct {
	// Held is the number of requests that waited before being sent
	// (including those that then failed while waiting).
	Held int64
	// HeldFor is the total time requests waited.
	HeldFor time.Duration
	// Refused is the number of requests that were never sent: their wait
	// would have gone past their deadline or MaxHold, or their context
	// ended while they waited.
	Refused int64
	// Keys is the number of keys remembered now.
	Keys int
}

// ErrHeldBack reports a request that a Pacer did not send. Use
// errors.As with *HoldError for the details.
var ErrHeldBack = errors.New("client: held back")

// HoldError is a request that a Pacer did not send because the server's
// quota for it was used up.
type HoldError struct {
	// Key is the host (or PaceKey value) whose quota is used up.
	Key string
	// Policy names the policy with nothing left; it is empty when a
	// Retry-After, or answers still in flight, held the request.
	Policy string
	// Wait is how long it would have had to wait from the moment it
	// failed, 0 when unknown (waiting for answers in flight).
	Wait time.Duration
	// Cause is context.DeadlineExceeded when the request's deadline
	// comes first, the context's error when it ended while the request
	// waited, and nil when the wait is longer than MaxHold.
	Cause error
}

// Error says what held the request and for how long.
func (e *HoldError) Error() string {
	what := "its Retry-After"
	switch {
	case e.Policy != "":
		what = fmt.Sprintf("policy %q", e.Policy)
	case e.Wait <= 0:
		what = "answers in flight"
	}
	switch {
	case e.Wait <= 0 && e.Cause == nil:
		return fmt.Sprintf("client: held back: %s was waiting for quota (%s) longer than the pacer's MaxHold", e.Key, what)
	case e.Wait <= 0 && e.Cause != nil:
		return fmt.Sprintf("client: held back: %s was waiting for quota (%s): %v", e.Key, what, e.Cause)
	case errors.Is(e.Cause, context.DeadlineExceeded):
		return fmt.Sprintf("client: held back: %s has no quota left (%s) for %s, past the request's deadline: %v",
			e.Key, what, e.Wait, e.Cause)
	case e.Cause != nil:
		return fmt.Sprintf("client: held back: %s has no quota left (%s) for %s: %v", e.Key, what, e.Wait, e.Cause)
	}
	return fmt.Sprintf("client: held back: %s has no quota left (%s) for %s, longer than the pacer's MaxHold",
		e.Key, what, e.Wait)
}

// Unwrap lets errors.Is match ErrHeldBack and the Cause.
func (e *HoldError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrHeldBack}
	}
	return []error{ErrHeldBack, e.Cause}
}

const (
	// maxPolicies bounds the policies remembered per key.
	maxPolicies = 16
	// maxClasses bounds the kinds of requests remembered per key; one bit
	// per kind in each policy.
	maxClasses = 64
	// maxProbe is the bound on requests in flight after a key-wide
	// Retry-After past which the key goes unbounded again.
	maxProbe = 64
)

// paceKey is what a Pacer knows about one key. Its fields are guarded by
// the Pacer's mu.
type paceKey struct {
	name string
	elem *list.Element
	// until holds every request back: a Retry-After that named no used-up
	// policy.
	until time.Time
	// probe, when above 0, bounds the requests in flight once until has
	// passed: one goes to find out, and each answer the server accepts
	// lets one more go, until maxProbe, when the bound is dropped; a
	// refusal with a Retry-After starts again from one. Only requests
	// sent after the refusal count (tickets after probeFrom): one sent
	// before, a stream that stays open, holds nothing back.
	probe     int
	probeFrom uint64
	// classes are the kinds of requests whose answers came back, by hash.
	classes  [maxClasses]uint64
	nclasses int
	policies []pacePolicy
	// inflight are the requests sent and not answered yet, by ascending
	// ticket number.
	inflight []flight
	// changed is closed when an answer comes back; nil until someone
	// waits for it.
	changed chan struct{}
	// answers counts the answers with RateLimit fields taken in.
	answers uint64
}

// flight is one request in flight.
type flight struct {
	seq uint64
	// class is the index of the request's kind, -1 when it was not known
	// when the request went (it then counts against every policy).
	class int
}

// pacePolicy is what a key reported about one policy.
type pacePolicy struct {
	name string
	// seq is the newest ticket whose answer named the policy.
	seq uint64
	// fresh is set until the first answer is taken in.
	fresh bool
	// r is the remaining units, the lowest answer since resetAt was
	// reached; resetAt is when more come (zero: the answer had no t).
	r       int64
	resetAt time.Time
	// q and w are the policy's quota and window, 0 when unknown.
	q int64
	w time.Duration
	// applies has bit i set when classes[i] carried this policy.
	applies uint64
}

// NewPacer returns an empty Pacer.
func NewPacer(opts PacerOptions) *Pacer {
	p := &Pacer{maxKeys: opts.MaxKeys, maxHold: opts.MaxHold, seed: maphash.MakeSeed(), keys: map[string]*paceKey{}}
	if p.maxKeys <= 0 {
		p.maxKeys = 1024
	}
	if p.maxHold <= 0 {
		p.maxHold = 60 * time.Second
	}
	return p
}

// Stats returns the Pacer's counters.
func (p *Pacer) Stats() PacerStats {
	p.mu.Lock()
	n := len(p.keys)
	p.mu.Unlock()
	return PacerStats{Held: p.held.Load(), HeldFor: time.Duration(p.heldNanos.Load()), Refused: p.refused.Load(), Keys: n}
}

// class hashes a kind of request (an HTTP method and path, a gRPC
// method).
func (p *Pacer) class(kind string) uint64 { return maphash.String(p.seed, kind) }

// ticket is one request the Pacer let go; finish it with the answer.
type ticket struct {
	p     *Pacer
	k     *paceKey // the key's state when it went (forgotten since, maybe)
	key   string
	seq   uint64
	class uint64
	// answers is k.answers when the request went.
	answers uint64
	// applied reports that an answer was taken in; guarded by p.mu.
	applied bool
}

// verdict is the Pacer's answer for one request at one instant.
type verdict struct {
	// until, when not zero, is when the quota is back.
	until  time.Time
	policy string
	// answers reports that the request waits for answers in flight.
	answers bool
	// recheck, when not zero, is when a policy the request waits on
	// refills a unit, so that it may go without those answers.
	recheck time.Time
}

func (v verdict) ok() bool { return v.until.IsZero() && !v.answers }

// avail is the number of units the policy has at now, before counting the
// requests in flight.
func (pp *pacePolicy) avail(now time.Time) int64 {
	if pp.resetAt.IsZero() {
		return max(pp.r, 1) // no t: one request at a time finds out
	}
	if now.Before(pp.resetAt) {
		return pp.r
	}
	a := max(pp.r, 1)
	if pp.q > 0 && pp.w > 0 {
		top := max(pp.q, a)
		since := now.Sub(pp.resetAt)
		if since >= pp.w {
			return top
		}
		a = min(top, a+int64(float64(pp.q)*float64(since)/float64(pp.w)))
	}
	return a
}

// minRefillStep bounds how often a request held for answers in flight
// looks again for a refilled unit.
const minRefillStep = time.Millisecond

// refills returns the first instant after now at which avail may grow by
// a unit, by the policy's quota (q over w) refilling after the reset;
// zero when it does not grow with time.
func (pp *pacePolicy) refills(now time.Time) time.Time {
	if pp.resetAt.IsZero() || pp.q <= 0 || pp.w <= 0 || pp.avail(now) >= max(pp.q, pp.r, 1) {
		return time.Time{}
	}
	step := max(pp.w/time.Duration(pp.q), minRefillStep)
	since := max(now.Sub(pp.resetAt), 0)
	return pp.resetAt.Add((since/step + 1) * step)
}

// classIndex returns the index of a kind of request, -1 when unknown.
func (k *paceKey) classIndex(h uint64) int {
	for i := range k.nclasses {
		if k.classes[i] == h {
			return i
		}
	}
	return -1
}

// learn returns the index of a kind of request, remembering it when there
// is room; -1 when there is none.
func (k *paceKey) learn(h uint64) int {
	if i := k.classIndex(h); i >= 0 {
		return i
	}
	if k.nclasses == maxClasses {
		return -1
	}
	k.classes[k.nclasses] = h
	k.nclasses++
	return k.nclasses - 1
}

// covers reports whether policy pp applies to requests of kind ci.
func covers(pp *pacePolicy, ci int) bool { return ci < 0 || pp.applies&(1<<uint(ci)) != 0 }

// pending counts the requests in flight that pp's units must pay for:
// all of a kind it applies to, even those sent before the answer pp
// knows, since the server may have counted them after it (when it did
// not, their answers leave r as it is, and they stop counting).
func (k *paceKey) pending(pp *pacePolicy) int64 {
	n := int64(0)
	for _, f := range k.inflight {
		if covers(pp, f.class) {
			n++
		}
	}
	return n
}

// probing counts the requests in flight sent since the last key-wide
// Retry-After was taken in.
func (k *paceKey) probing() int {
	n := 0
	for i := len(k.inflight) - 1; i >= 0 && k.inflight[i].seq > k.probeFrom; i-- {
		n++
	}
	return n
}

// decide says whether a request of kind class may go at now.
func (k *paceKey) decide(now time.Time, class uint64) verdict {
	var v verdict
	if now.Before(k.until) {
		v.until = k.until
	} else if k.probe > 0 && k.probing() >= k.probe {
		// A key-wide Retry-After has passed: the requests it held go as
		// the answers come, not all at once into the same refusal.
		v.answers = true
	}
	ci := k.classIndex(class)
	for i := range k.policies {
		pp := &k.policies[i]
		if !covers(pp, ci) {
			continue
		}
		a := pp.avail(now)
		if a <= 0 { // only before the reset: avail is at least 1 after it
			if pp.resetAt.After(v.until) {
				v.until, v.policy = pp.resetAt, pp.name
			}
			continue
		}
		if a <= int64(len(k.inflight)) && a-k.pending(pp) <= 0 {
			v.answers = true
			if at := pp.refills(now); !at.IsZero() && (v.recheck.IsZero() || at.Before(v.recheck)) {
				v.recheck = at
			}
		}
	}
	return v
}

// policy returns the key's policy named name, adding it (in place of the
// one with the oldest answer when there are maxPolicies already).
func (k *paceKey) policy(name string) *pacePolicy {
	for i := range k.policies {
		if k.policies[i].name == name {
			return &k.policies[i]
		}
	}
	if len(k.policies) < maxPolicies {
		k.policies = append(k.policies, pacePolicy{name: name, fresh: true})
		return &k.policies[len(k.policies)-1]
	}
	old := 0
	for i := range k.policies {
		if k.policies[i].seq < k.policies[old].seq {
			old = i
		}
	}
	k.policies[old] = pacePolicy{name: name, fresh: true}
	return &k.policies[old]
}

// apply takes in the answer to ticket seq, of kind class, received at
// now; since answers came back while it was in flight, and last is the
// newest ticket given.
func (k *paceKey) apply(now time.Time, seq, class, since, last uint64, a *answerFields) {
	ci := k.learn(class)
	if len(a.quotas) > 0 {
		k.answers++
	}
	if !now.Before(k.until) {
		k.until = time.Time{}
	}
	exhausted := false
	for _, f := range a.quotas {
		pp := k.policy(f.name)
		if ci >= 0 {
			pp.applies |= 1 << uint(ci)
		}
		if f.q > 0 || f.w > 0 {
			pp.q, pp.w = f.q, f.w
		}
		resetAt := time.Time{}
		if f.hasT {
			resetAt = now.Add(f.t)
		}
		pp.seq = max(pp.seq, seq)
		switch {
		case pp.fresh || pp.resetAt.IsZero() || !now.Before(pp.resetAt):
			// The first answer, or the first since the known reset: it
			// starts a new count. Each answer that came back while it was
			// in flight may have been counted after it by the server.
			pp.fresh, pp.r, pp.resetAt = false, max(0, f.r-int64(min(since, 1<<62))), resetAt
		case f.r <= pp.r:
			// Until the reset, what remains only goes down: answers come
			// back in any order, and the lowest is the server's latest.
			pp.r = f.r
			if resetAt.After(pp.resetAt) {
				pp.resetAt = resetAt
			}
		}
		if f.r <= 0 {
			exhausted = true
			if a.refused && a.hasRetry {
				// Retry-After wins over t, sooner or later: the draft
				// gives it precedence.
				pp.r, pp.resetAt = min(pp.r, 0), now.Add(a.retryAfter)
			}
		}
	}
	switch {
	case a.refused && a.hasRetry && !exhausted:
		if ra := now.Add(a.retryAfter); ra.After(k.until) {
			k.until = ra
		}
		k.probe, k.probeFrom = 1, last
	case k.probe > 0 && !a.refused && !now.Before(k.until):
		if k.probe++; k.probe > maxProbe {
			k.probe = 0
		}
	}
}

// wake tells every request waiting on k that something changed.
func (k *paceKey) wake() {
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
}

// removeFlight forgets the request seq, if k holds it.
func (k *paceKey) removeFlight(seq uint64) {
	lo, hi := 0, len(k.inflight)
	for lo < hi {
		m := (lo + hi) / 2
		if k.inflight[m].seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(k.inflight) && k.inflight[lo].seq == seq {
		k.inflight = append(k.inflight[:lo], k.inflight[lo+1:]...)
	}
}

// lookup returns the state of key, nil when none; it marks it used.
// p.mu is held.
func (p *Pacer) lookup(key string) *paceKey {
	k := p.keys[key]
	if k != nil {
		p.lru.MoveToFront(k.elem)
	}
	return k
}

// add returns a new state for key at now, forgetting one when there are
// MaxKeys already: the least recently used that holds nothing back, or,
// when every key holds something, the least recently used. A flood of
// calls to new hosts thus cannot make the Pacer forget a hold and send
// the requests it held into a refusal. p.mu is held.
func (p *Pacer) add(key string, now time.Time) *paceKey {
	for len(p.keys) >= p.maxKeys {
		var old *paceKey
		for e := p.lru.Back(); e != nil; e = e.Prev() {
			if k := e.Value.(*paceKey); !k.holds(now) {
				old = k
				break
			}
		}
		if old == nil {
			old = p.lru.Back().Value.(*paceKey)
		}
		p.lru.Remove(old.elem)
		delete(p.keys, old.name)
		old.wake() // its waiters look again, and find nothing
	}
	k := &paceKey{name: key}
	k.elem = p.lru.PushFront(k)
	p.keys[key] = k
	return k
}

// holds reports whether k may hold a request back at now, or will when
// answers come: a Retry-After not passed or its requests going one by
// one, a used-up policy before its reset, requests in flight.
func (k *paceKey) holds(now time.Time) bool {
	if now.Before(k.until) || k.probe > 0 || len(k.inflight) > 0 {
		return true
	}
	for i := range k.policies {
		if k.policies[i].avail(now) <= 0 {
			return true
		}
	}
	return false
}

// admit gives a ticket to a request to k that may go. p.mu is held.
func (p *Pacer) admit(k *paceKey, key string, class uint64) *ticket {
	p.seq++
	k.inflight = append(k.inflight, flight{seq: p.seq, class: k.classIndex(class)})
	return &ticket{p: p, k: k, key: key, seq: p.seq, class: class, answers: k.answers}
}

// take decides at now for a request of kind class to key: it returns a
// ticket when the request may go, else the verdict and a channel closed
// when an answer changes the key's state.
func (p *Pacer) take(now time.Time, key string, class uint64) (*ticket, verdict, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.lookup(key)
	if k == nil {
		// Known from the first request on, so that the requests in flight
		// when the first answer comes back are counted.
		k = p.add(key, now)
	}
	v := k.decide(now, class)
	if v.ok() {
		return p.admit(k, key, class), v, nil
	}
	if k.changed == nil {
		k.changed = make(chan struct{})
	}
	return nil, v, k.changed
}

// finish ends t's flight and takes in its answer received at now (nil when
// there was none: an error, or the caller gave up). It may be called more
// than once: the flight ends at the first call, and the first answer
// given is the one taken in.
func (t *ticket) finish(now time.Time, a *answerFields) { t.p.finish(t, now, a) }

func (p *Pacer) finish(t *ticket, now time.Time, a *answerFields) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.applied {
		a = nil
	} else if a != nil {
		t.applied = true
	}
	informative := a != nil && (len(a.quotas) > 0 || (a.refused && a.hasRetry))
	if t.k != nil {
		t.k.removeFlight(t.seq)
		t.k.wake()
	}
	k := p.lookup(t.key)
	if k == nil {
		if !informative {
			return
		}
		k = p.add(t.key, now)
	}
	if k != t.k {
		k.removeFlight(t.seq)
	}
	if a != nil {
		var since uint64
		if k == t.k {
			since = k.answers - t.answers
		}
		k.apply(now, t.seq, t.class, since, p.seq, a)
	}
	k.wake()
}

// acquire blocks until a request of kind class to key may go, and returns
// its ticket; or returns a *HoldError when the wait would go past ctx's
// deadline or MaxHold, or ctx ends first.
func (p *Pacer) acquire(ctx context.Context, key string, class uint64) (*ticket, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var heldSince time.Time
	for {
		now := time.Now()
		t, v, changed := p.take(now, key, class)
		if t != nil {
			if !heldSince.IsZero() {
				p.heldNanos.Add(int64(now.Sub(heldSince)))
			}
			return t, nil
		}
		fail := func(wait time.Duration, cause error) (*ticket, error) {
			p.refused.Add(1)
			if !heldSince.IsZero() {
				p.heldNanos.Add(int64(now.Sub(heldSince)))
			}
			return nil, &HoldError{Key: key, Policy: v.policy, Wait: wait, Cause: cause}
		}
		var alarm <-chan time.Time
		if !v.until.IsZero() {
			wait := v.until.Sub(now)
			if dl, ok := ctx.Deadline(); ok && dl.Before(v.until) {
				return fail(wait, context.DeadlineExceeded)
			}
			if wait > p.maxHold {
				return fail(wait, nil)
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			alarm = timer.C
		} else {
			// Held for answers in flight, which the quota may make
			// needless before they come; an answer that never comes (a
			// stalled connection, a long stream) holds no request longer
			// than MaxHold in all.
			since := heldSince
			if since.IsZero() {
				since = now
			}
			at := since.Add(p.maxHold)
			if !now.Before(at) {
				return fail(0, nil)
			}
			if !v.recheck.IsZero() && v.recheck.Before(at) {
				at = v.recheck
			}
			if timer == nil {
				timer = time.NewTimer(at.Sub(now))
			} else {
				timer.Reset(at.Sub(now))
			}
			alarm = timer.C
		}
		if heldSince.IsZero() {
			heldSince = now
			p.held.Add(1)
		}
		select {
		case <-ctx.Done():
			now = time.Now()
			wait := time.Duration(0)
			if !v.until.IsZero() {
				wait = max(0, v.until.Sub(now))
			}
			return fail(wait, ctx.Err())
		case <-alarm:
		case <-changed:
		}
	}
}
