package policy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// Key is an API key as a policy resolves it: its name, its usage plan, the
// plan's limits as they apply to this key (a key may have its own rate,
// burst or quota) and the counter key its limits count it under.
type Key struct {
	name    string
	plan    *plan
	rate    *Limit
	quota   *Limit
	counter string // "key:NAME", or "key:NAME#N" at generation N
}

func newKey(name string, pl *plan, rate, quota *Limit, generation int64) *Key {
	counter := "key:" + name
	if generation > 0 {
		counter += "#" + strconv.FormatInt(generation, 10)
	}
	return &Key{name: name, plan: pl, rate: rate, quota: quota, counter: counter}
}

// Name returns the key's name.
func (k *Key) Name() string { return k.name }

// Plan returns the name of the key's usage plan.
func (k *Key) Plan() string { return k.plan.name }

// Limits returns the plan's limits as they apply to the key, rate first;
// either may be nil.
func (k *Key) Limits() (rate, quota *Limit) { return k.rate, k.quota }

// Counter returns the key its limits count it under: "key:NAME", or
// "key:NAME#N" at generation N (KeyOptions.Generation).
func (k *Key) Counter() string { return k.counter }

// Hits returns the hits of the key's plan limits at cost 1, rate first,
// for a peek at its usage.
func (k *Key) Hits() ([]limiter.Hit, []*Limit) {
	var hits []limiter.Hit
	var limits []*Limit
	for _, l := range []*Limit{k.rate, k.quota} {
		if l != nil {
			hits = append(hits, limiter.Hit{Rule: l.Rule, Key: k.counter, Cost: 1})
			limits = append(limits, l)
		}
	}
	return hits, limits
}

// KeyOptions are what a key managed outside the file may change of its
// plan. Zero values keep the plan's.
type KeyOptions struct {
	// Rate and Burst replace the plan's throttle (requests per the plan's
	// Per, and the bucket).
	Rate, Burst int64
	// Quota replaces the plan's quota limit (requests per the plan's
	// period); the key's count of the period stays.
	Quota int64
	// Generation, when positive, names the key's counters ("key:NAME#N"):
	// a reset gives the key a new one, so that it counts afresh under a
	// new counter key. 0 counts it under "key:NAME".
	Generation int64
	// KeepOwn leaves out a rate, burst or quota the plan has no limit for
	// (a reload took it from the plan) instead of refusing the key: a key
	// that is already in use keeps working under its plan as it is now.
	KeepOwn bool
}

// ErrUnknownPlan reports a key whose plan the policy does not have.
var ErrUnknownPlan = errors.New("policy: unknown plan")

// NewKey resolves a key that is not in the file against p: name, plan and
// options. A changed rate or burst is its own limit (named as the plan's,
// counted separately), so a key that gets one starts it afresh. A changed
// quota is the plan's at another size, counted in the plan quota's
// counters (limiter.RuleOptions.CountsAs): the key keeps what it used in
// the period, and a quota lowered below that refuses until the period
// ends.
func (p *Policy) NewKey(name, planName string, o KeyOptions) (*Key, error) {
	pl, ok := p.plans[planName]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownPlan, planName)
	}
	rate, quota := pl.rate, pl.quota
	if (o.Rate > 0 || o.Burst > 0) && rate != nil {
		l := rate.Rule.Limit()
		if o.Rate > 0 {
			l.Rate = o.Rate
		}
		if o.Burst > 0 {
			l.Burst = o.Burst
		}
		r, err := overrideLimit(rate, l, nil)
		if err != nil {
			return nil, err
		}
		rate = r
	}
	if o.Quota > 0 && quota != nil {
		l := quota.Rule.Limit()
		l.Max = o.Quota
		// Counted where the plan's quota counts the key: a new size, not
		// a new count.
		q, err := overrideLimit(quota, l, quota.Rule)
		if err != nil {
			return nil, err
		}
		quota = q
	}
	if (o.Rate > 0 || o.Burst > 0) && rate == nil && !o.KeepOwn {
		return nil, fmt.Errorf("policy: key %q: plan %q has no rate to change", name, planName)
	}
	if o.Quota > 0 && quota == nil && !o.KeepOwn {
		return nil, fmt.Errorf("policy: key %q: plan %q has no quota to change", name, planName)
	}
	return newKey(name, pl, rate, quota, o.Generation), nil
}

// overrideLimit is base with the limit l (the same name and kind), and
// base's failure policy, shadow mode and consistency; counted in the
// counters of countsAs when that is not nil (limiter.RuleOptions).
func overrideLimit(base *Limit, l floodgate.Limit, countsAs *limiter.Rule) (*Limit, error) {
	r, err := limiter.NewRuleWith(l, limiter.RuleOptions{OnFailure: base.Rule.OnFailure(), Shadow: base.Rule.Shadow(),
		Consistency: base.Rule.Consistency(), CountsAs: countsAs})
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", l.Name, err)
	}
	o := newLimit(l.Name, base.Scope, r, base.Key, base.Cost)
	o.Plan, o.MatchText = base.Plan, base.MatchText
	return o, nil
}

// FileKey returns the key of the file named name.
func (p *Policy) FileKey(name string) (*Key, bool) {
	for _, k := range p.keys {
		if k.name == name {
			return k, true
		}
	}
	return nil, false
}

// Plans returns the names of the usage plans, in file order.
func (p *Policy) Plans() []string {
	out := make([]string, 0, len(p.file.Plans))
	for i := range p.file.Plans {
		out = append(out, p.file.Plans[i].Name)
	}
	return out
}

// Version names the version of the file the policy was loaded from: the
// first 12 hex digits of its SHA-256 (empty when it was not loaded by a
// Reloader).
func (p *Policy) Version() string {
	if p.hash == [sha256.Size]byte{} {
		return ""
	}
	return fmt.Sprintf("%x", p.hash[:6])
}

// KeySource supplies the API keys that are not in the file (keys managed
// through the admin API). Match consults it for a key whose SHA-256 the
// file does not have: the file's keys take precedence. LookupKey is called
// on the request path; it must be quick and safe for concurrent use, and
// return nil for an unknown (revoked, disabled, expired) key.
type KeySource interface {
	LookupKey(p *Policy, sum *[sha256.Size]byte) *Key
}

// KeyNamer is a KeySource that also finds its keys by name, for a request
// that gives its API key by name (Request.KeyName, as an access log
// replayed does). Match asks it for a name the file does not have;
// *keystore.Store is one. LookupKeyName returns nil for an unknown
// (revoked, disabled) key.
type KeyNamer interface {
	LookupKeyName(p *Policy, name string) *Key
}

// keyHook holds the KeySource of a Reloader's policies.
type keyHook struct {
	src atomic.Pointer[KeySource]
}

// dynamicKey asks the key source, if any, for a key the file lacks.
func (p *Policy) dynamicKey(sum *[sha256.Size]byte) *Key {
	if p.dynamic == nil {
		return nil
	}
	src := p.dynamic.src.Load()
	if src == nil {
		return nil
	}
	return (*src).LookupKey(p, sum)
}

// dynamicKeyNamed asks the key source, if it finds keys by name, for a
// key the file lacks.
func (p *Policy) dynamicKeyNamed(name string) *Key {
	if p.dynamic == nil {
		return nil
	}
	src := p.dynamic.src.Load()
	if src == nil {
		return nil
	}
	if n, ok := (*src).(KeyNamer); ok {
		return n.LookupKeyName(p, name)
	}
	return nil
}

// SetKeySource makes the policies of r (the current one and every later
// version) consult src for API keys the file does not have.
func (r *Reloader) SetKeySource(src KeySource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.Load().dynamic.src.Store(&src)
}
