package floodgate

import "fmt"

// Consistency says how the instances that share a store keep a limit:
// every decision asks the store, or each instance spends units it took
// from the store in advance.
type Consistency uint8

// Consistencies. The zero value is Exact.
const (
	// Exact decides every request in the store: the limit holds across
	// all instances to the unit.
	Exact Consistency = iota
	// Leased lets each instance take a lease of units from the store and
	// spend it locally, returning what is left when the lease ends: far
	// fewer store calls for a hot key, for a bounded over-admission (see
	// package limiter). Only algorithms whose Traits say Leasable can be
	// leased.
	Leased
)

// String returns exact or leased, as written in configuration files.
func (c Consistency) String() string {
	switch c {
	case Exact:
		return "exact"
	case Leased:
		return "leased"
	}
	return fmt.Sprintf("consistency(%d)", uint8(c))
}

// ParseConsistency accepts exact (or nothing) and leased.
func ParseConsistency(s string) (Consistency, error) {
	switch s {
	case "exact", "":
		return Exact, nil
	case "leased":
		return Leased, nil
	}
	return 0, fmt.Errorf("%w: unknown consistency %q (want exact or leased)", ErrInvalidLimit, s)
}
