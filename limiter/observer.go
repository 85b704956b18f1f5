package limiter

import (
	"time"

	"github.com/floodgate/floodgate"
)

// Observer is told about every decision the engine makes, for metrics: the
// gateway counts allowed, denied, shadow and degraded decisions per rule.
// ObserveDecision is called on the request's goroutine and must be quick
// and safe for concurrent use.
type Observer interface {
	ObserveDecision(e Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// ObserveDecision calls f(e).
func (f ObserverFunc) ObserveDecision(e Event) { f(e) }

// Event is one hit's decision.
type Event struct {
	// Op is Charge or Peek.
	Op Op
	// Rule and Key are the hit's.
	Rule *Rule
	Key  string
	// Decision is the hit's decision.
	Decision floodgate.Decision
	// Degraded reports a decision by the rule's failure policy.
	Degraded bool
	// Shadow reports a shadow rule: its denials block nothing.
	Shadow bool
	// StoreLatency is how long the store call took (the same for every
	// hit of a request; 0 when the breaker skipped the store).
	StoreLatency time.Duration
}
