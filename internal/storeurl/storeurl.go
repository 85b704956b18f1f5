package storeurl

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/floodgate/floodgate"
)

var (
	mu     sync.RWMutex // guards checks and limitChecks
	checks = map[string]func(url string) error{}
	// limitChecks holds the schemes whose stores cannot decide every
	// valid limit exactly.
	limitChecks = map[string]func(l *floodgate.Limit) error{}
)

// RegisterLimitCheck gives scheme's stores a check of the limits they
// decide: check reports, as a *floodgate.ParamError, a limit the store
// cannot decide exactly (nil: it can). Package config tells such a limit
// at its field when the file's store is of that scheme.
func RegisterLimitCheck(scheme string, check func(l *floodgate.Limit) error) {
	mu.Lock()
	defer mu.Unlock()
	limitChecks[strings.ToLower(scheme)] = check
}

// CheckLimit reports whether the store url names can decide l exactly
// (nil), or why not: a *floodgate.ParamError from the check its scheme
// registered. A scheme without one decides every valid limit.
func CheckLimit(url string, l *floodgate.Limit) error {
	mu.RLock()
	check := limitChecks[Scheme(url)]
	mu.RUnlock()
	if check == nil {
		return nil
	}
	return check(l)
}

// Register makes scheme known, with check reporting whether a URL of that
// scheme can be opened (nil) or why not. It reports an error for an empty
// scheme, a nil check or a scheme already known.
func Register(scheme string, check func(url string) error) error {
	if scheme == "" || check == nil {
		return errors.New("storeurl: register: a scheme and a check are required")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := checks[scheme]; dup {
		return fmt.Errorf("storeurl: register: scheme %q is registered twice", scheme)
	}
	checks[scheme] = check
	return nil
}

// Scheme returns the scheme of a store URL: what comes before "://", or
// the whole of a URL without one ("memory"), in lower case.
func Scheme(url string) string {
	s, _, _ := strings.Cut(url, "://")
	return strings.ToLower(s)
}

// Check reports whether url names a store of a registered scheme that the
// scheme's own check accepts.
func Check(url string) error {
	scheme := Scheme(url)
	mu.RLock()
	check, ok := checks[scheme]
	mu.RUnlock()
	if !ok {
		return fmt.Errorf("unknown store scheme %s (this program opens %s)", SchemeShown(url), strings.Join(Schemes(), ", "))
	}
	return check(url)
}

// SchemeShown is how a message shows the scheme of url: quoted, or, for
// a value without "://" or whose scheme is not written as RFC 3986 writes
// one, a phrase that shows none of it. A URL mistyped without its "://"
// ("redis:/:pass@host"), or a password given where the URL was meant,
// would otherwise be shown whole as its scheme.
func SchemeShown(url string) string {
	scheme, _, ok := strings.Cut(url, "://")
	if !ok || !validScheme(scheme) {
		return "in a value not shown, as it may hold a password: it is not a URL such as redis://host:6379"
	}
	return strconv.Quote(strings.ToLower(scheme))
}

// validScheme reports whether s is a URL scheme: a letter, then letters,
// digits, "+", "-" and ".".
func validScheme(s string) bool {
	for i, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(checks))
	for s := range checks {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
