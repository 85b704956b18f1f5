package storeurl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

var (
	mu     sync.RWMutex // guards checks
	checks = map[string]func(url string) error{}
)

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
		return fmt.Errorf("unknown store scheme %q (this program opens %s)", scheme, strings.Join(Schemes(), ", "))
	}
	return check(url)
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
