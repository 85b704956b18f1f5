package limiter

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
)

// Rule is a compiled limit as the engine and the stores use it. It is
// immutable once NewRule made it, and safe to share.
type Rule struct {
	limit       floodgate.Limit
	params      algo.Params
	onFailure   floodgate.FailurePolicy
	shadow      bool
	consistency floodgate.Consistency
	id          string
}

// Limit returns (a copy of) the limit the rule was made from.
func (r *Rule) Limit() floodgate.Limit { return r.limit }

// Name returns the limit's name.
func (r *Rule) Name() string { return r.limit.Name }

// Algorithm returns the limit's algorithm.
func (r *Rule) Algorithm() floodgate.Algorithm { return r.limit.Algorithm }

// Params returns the compiled parameters the algorithms decide with. They
// cannot be changed through the pointer (algo.Params has no exported
// fields and no method that modifies it).
func (r *Rule) Params() *algo.Params { return &r.params }

// Capacity returns the largest cost a single request can have.
func (r *Rule) Capacity() int64 { return r.params.Capacity() }

// OnFailure returns what the rule does when its store cannot answer.
func (r *Rule) OnFailure() floodgate.FailurePolicy { return r.onFailure }

// Shadow reports a shadow rule: evaluated and counted, never blocking.
func (r *Rule) Shadow() bool { return r.shadow }

// Consistency returns how the instances sharing the store keep the rule
// (see LeaseOptions for Leased).
func (r *Rule) Consistency() floodgate.Consistency { return r.consistency }

// ID names the rule's counters in a store: the limit's name and a
// fingerprint of its parameters, so that a changed limit starts afresh and
// an unchanged one keeps its counts across reloads.
func (r *Rule) ID() string { return r.id }

// RuleOptions are the settings of a rule beyond its limit. The zero value
// is an enforced, exact rule that falls back to a local share (FailLocal).
type RuleOptions struct {
	// OnFailure is what the rule does when its store cannot answer.
	OnFailure floodgate.FailurePolicy
	// Shadow makes a shadow rule: evaluated and counted, never blocking.
	Shadow bool
	// Consistency is Exact (every decision asks the store) or Leased
	// (each instance spends units taken in advance; only for algorithms
	// whose traits say Leasable, and not in shadow mode). A rule's
	// counters are the same either way, so switching keeps them.
	Consistency floodgate.Consistency
}

// NewRule validates and compiles a limit.
func NewRule(l floodgate.Limit, onFailure floodgate.FailurePolicy, shadow bool) (*Rule, error) {
	return NewRuleWith(l, RuleOptions{OnFailure: onFailure, Shadow: shadow})
}

// NewRuleWith validates and compiles a limit with its settings.
func NewRuleWith(l floodgate.Limit, o RuleOptions) (*Rule, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	switch {
	case o.Consistency > floodgate.Leased:
		return nil, fmt.Errorf("limiter: %s: %w: unknown consistency %d", l.Name, floodgate.ErrInvalidLimit, o.Consistency)
	case o.Consistency == floodgate.Leased && !l.Algorithm.Traits().Leasable:
		return nil, fmt.Errorf("limiter: %s: %w: %s cannot be leased (token_bucket, gcra, leaky_bucket and fixed_window can)",
			l.Name, floodgate.ErrInvalidLimit, l.Algorithm)
	case o.Consistency == floodgate.Leased && o.Shadow:
		return nil, fmt.Errorf("limiter: %s: %w: a shadow rule cannot be leased", l.Name, floodgate.ErrInvalidLimit)
	}
	p, err := algo.Compile(&l)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	return &Rule{limit: l, params: p, onFailure: o.OnFailure, shadow: o.Shadow, consistency: o.Consistency, id: ruleID(&l)}, nil
}

// ruleID is the limit's name followed by a short fingerprint of everything
// that changes how its state is read.
func ruleID(l *floodgate.Limit) string {
	h := fnv.New64a()
	loc := ""
	if l.Location != nil {
		loc = l.Location.String()
	}
	fmt.Fprintf(h, "%d|%d|%d|%d|%d|%d|%d|%d|%d|%s|%d|%d|%d",
		l.Algorithm, l.Rate, l.Per, l.Burst, l.Delay, l.Max, l.Window, l.LeaseTTL,
		l.Period, loc, l.AnchorDay, l.Offset, l.Start.UnixNano())
	name := l.Name
	if name == "" {
		name = l.Algorithm.String()
	}
	return name + "." + strconv.FormatUint(h.Sum64()&0xffffffffff, 36)
}

// PlaceholderRule returns a rule that carries only an ID and decides
// nothing: a store loading saved state holds the state of a rule it has not
// been asked about yet under it, until the first hit of the real rule
// replaces it.
func PlaceholderRule(id string) *Rule { return &Rule{id: id} }
