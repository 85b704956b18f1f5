package floodgate

import "fmt"

// FailurePolicy says what a limit does when its store cannot answer in time.
type FailurePolicy uint8

// Failure policies. The zero value is FailLocal.
const (
	// FailLocal falls back to a local limit of the global one divided by
	// the number of instances (algo.SplitLimit).
	FailLocal FailurePolicy = iota
	// FailOpen allows every request (fail open).
	FailOpen
	// FailClosed denies every request (fail closed), for login and payments.
	FailClosed
)

// String returns local, allow or deny, as written in configuration files.
func (p FailurePolicy) String() string {
	switch p {
	case FailLocal:
		return "local"
	case FailOpen:
		return "allow"
	case FailClosed:
		return "deny"
	}
	return fmt.Sprintf("failure(%d)", uint8(p))
}

// ParseFailurePolicy accepts allow, deny or local.
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	switch s {
	case "local", "":
		return FailLocal, nil
	case "allow":
		return FailOpen, nil
	case "deny":
		return FailClosed, nil
	}
	return 0, fmt.Errorf("%w: unknown failure policy %q (want allow, deny or local)", ErrInvalidLimit, s)
}
