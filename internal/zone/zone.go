// Package zone loads the time zones of calendar quotas by their IANA
// names, refusing the names that mean something else on each machine.
package zone

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotNamed refuses a zone that is not an IANA name: "Local" (each
// machine's own zone, so instances sharing a store would cut one quota's
// periods at different midnights, or count it under different rule IDs)
// and a path to a zone file.
var ErrNotNamed = errors.New("zone: want an IANA name such as Asia/Kolkata, the same on every machine")

// Load returns the zone named name: "" and "UTC" are UTC; "Local" and
// paths are ErrNotNamed.
func Load(name string) (*time.Location, error) {
	if name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("%w: %q", ErrNotNamed, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("zone: %w", err)
	}
	return loc, nil
}
