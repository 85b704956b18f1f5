package gateway

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
)

// fieldCacheSize is the number of rules whose response fields a Gateway
// keeps for Matchers that leave Match.Fields empty: a power of two.
const fieldCacheSize = 64

// fieldCache remembers the response fields of the rules a Matcher names
// without them (a Matcher of the caller's own, not the policy's), so that
// they are computed once per rule rather than once per request. It is a
// direct-mapped table of a fixed size: a rule replaces whatever shared its
// slot, and rules dropped by a reload fall out as others take their
// slots, so its memory is bounded whatever the reloads. Safe for
// concurrent use.
type fieldCache struct {
	seed  maphash.Seed
	slots [fieldCacheSize]atomic.Pointer[ruleFields]
}

type ruleFields struct {
	rule *limiter.Rule
	f    *fields.Limit
}

func newFieldCache() *fieldCache { return &fieldCache{seed: maphash.MakeSeed()} }

// get returns r's fields, computing them when r is not in the table.
func (c *fieldCache) get(r *limiter.Rule) *fields.Limit {
	slot := &c.slots[maphash.Comparable(c.seed, r)&(fieldCacheSize-1)]
	if e := slot.Load(); e != nil && e.rule == r {
		return e.f
	}
	f := fields.ForRule(r)
	slot.Store(&ruleFields{rule: r, f: f})
	return f
}
