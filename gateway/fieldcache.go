package gateway

import (
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
)

// fieldsSlot keeps, on each rule, its response fields (a *fields.Limit).
var fieldsSlot = limiter.NewSlot()

// fieldCache gives the response fields of the rules a Matcher names
// without them (a Matcher of the caller's own, not the policy's): they are
// computed once per rule rather than once per request, and kept on the
// rule itself (limiter.Rule.Prepared), so that they live exactly as long as
// the rule, whatever the reloads. Safe for concurrent use.
type fieldCache struct{}

func newFieldCache() *fieldCache { return &fieldCache{} }

// get returns r's fields, computing them the first time.
func (*fieldCache) get(r *limiter.Rule) *fields.Limit {
	return r.Prepared(fieldsSlot, ruleFields).(*fields.Limit)
}

func ruleFields(r *limiter.Rule) any { return fields.ForRule(r) }
