package limiter

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
)

// Rule is a compiled, immutable limit as the engine and the stores use it.
type Rule struct {
	Limit     floodgate.Limit
	Params    algo.Params
	OnFailure floodgate.FailurePolicy
	// Shadow rules are evaluated and counted but never block.
	Shadow bool
	// ID names the rule's counters in a store: the limit's name and a
	// fingerprint of its parameters, so that a changed limit starts afresh
	// and an unchanged one keeps its counts across reloads.
	ID string
}

// NewRule validates and compiles a limit.
func NewRule(l floodgate.Limit, onFailure floodgate.FailurePolicy, shadow bool) (*Rule, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	p, err := algo.Compile(&l)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	return &Rule{Limit: l, Params: p, OnFailure: onFailure, Shadow: shadow, ID: ruleID(&l)}, nil
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
