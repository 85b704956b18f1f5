package policy

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/config"
)

// TenantKind is what a route's overload queue serves in turn.
type TenantKind uint8

// Tenant kinds of an Overload.
const (
	TenantClientIP TenantKind = iota
	TenantAPIKey
	TenantPlan
	TenantUser
	TenantHeader
)

// Overload is a route's compiled overload control (config.Overload):
// immutable. The gateway keeps the state (the requests in flight, the
// queue, the adaptive limit) in a controller per Key.
type Overload struct {
	// Key identifies the route and its settings: a controller of the
	// same Key carries over a reload unchanged.
	Key string
	// Route is the name of the route. The gateway keeps one controller
	// per route across reloads: a reload that changes the settings
	// retunes it, so that the requests in flight and waiting stay
	// counted under the route's cap.
	Route string
	// Seq orders the overload blocks by when they were compiled: a
	// block of a policy compiled later has a higher Seq, so that a
	// request matched by the policy before a reload, and looked up after
	// it, does not bring its route's controller back to the older
	// settings.
	Seq uint64
	// Limit is the fixed cap; 0 when Adaptive is set.
	Limit int
	// Adaptive, when set, learns the cap (algo.Adaptive).
	Adaptive *algo.AdaptiveOptions
	// Queue, when set, holds the requests over the cap for at most
	// Queue.MaxWait (algo.FairQueue).
	Queue *algo.FairQueueOptions[string]
	// Tenant and, for TenantHeader, TenantField (canonical) name what
	// the queue serves in turn.
	Tenant      TenantKind
	TenantField string
	// TenantSecret says TenantField carries a credential (the API key
	// header, the token's, Authorization, Cookie ...): its values name
	// tenants by their hash, never as they are (in metrics, explanations).
	TenantSecret bool
	// Tiers are the tiers' names, most critical first, and Ceilings
	// their reserves (algo.Tiers).
	Tiers    []string
	Ceilings algo.Tiers
	// Tier is the index of the route's own tier in Tiers.
	Tier int
	// TierHeader is the canonical name of the field a trusted proxy
	// names the tier in, or "".
	TierHeader string
}

// TierIndex returns the index of the tier named name, or -1.
func (o *Overload) TierIndex(name string) int {
	for i, t := range o.Tiers {
		if t == name {
			return i
		}
	}
	return -1
}

// NeedsUser reports whether the overload control tells its tenants by
// their users (tenant: user), so that a request's token must be verified
// for it even when none of the request's limits counts per user. It is
// false for nil.
func (o *Overload) NeedsUser() bool { return o != nil && o.Tenant == TenantUser }

// TierOf returns the tier of a request: header, the value of TierHeader
// from a trusted proxy ("" otherwise), when it names a tier; else the
// plan's tier; else the route's.
func (o *Overload) TierOf(header, planTier string) int {
	if header != "" {
		if t := o.TierIndex(header); t >= 0 {
			return t
		}
		return o.Tier // an unknown name is the route's tier
	}
	if planTier != "" {
		if t := o.TierIndex(planTier); t >= 0 {
			return t
		}
	}
	return o.Tier
}

// overloadSeq numbers the overload blocks compiled in this process
// (Overload.Seq).
var overloadSeq atomic.Uint64

// compileOverload compiles a validated overload block of route name.
func compileOverload(name string, c *config.Overload, srv *config.Server) *Overload {
	if c == nil {
		return nil
	}
	o := &Overload{Limit: c.Limit, TierHeader: c.TierHeader, Route: name, Seq: overloadSeq.Add(1)}
	if c.Adaptive != nil {
		a := c.AdaptiveOptions()
		o.Adaptive, o.Limit = &a, 0
	}
	if q := c.Queue; q != nil {
		o.Queue = &algo.FairQueueOptions[string]{Total: q.Size, PerTenant: q.PerTenant, MaxWait: q.MaxWait}
	}
	switch h, isHeader := strings.CutPrefix(c.Tenant, config.KeyHeaderPrefix); {
	case isHeader:
		o.Tenant, o.TenantField = TenantHeader, http.CanonicalHeaderKey(h)
		o.TenantSecret = credentialHeader(o.TenantField, srv)
	case c.Tenant == config.TenantAPIKey:
		o.Tenant = TenantAPIKey
	case c.Tenant == config.TenantPlan:
		o.Tenant = TenantPlan
	case c.Tenant == config.TenantUser:
		o.Tenant = TenantUser
	}
	reserves := make([]float64, len(c.Tiers))
	for i, t := range c.Tiers {
		o.Tiers = append(o.Tiers, t.Name)
		reserves[i] = t.Reserve
	}
	o.Ceilings, _ = algo.NewTiers(reserves...) // validated
	o.Tier = max(o.TierIndex(c.Tier), 0)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%d\x00%s\x00%s\x00%s\x00%s", name, o.Limit, c.Tenant, c.Tier, c.TierHeader, strings.Join(o.Tiers, ","))
	for _, r := range reserves {
		fmt.Fprintf(&b, ",%g", r)
	}
	if a := o.Adaptive; a != nil {
		fmt.Fprintf(&b, "\x00%d,%d,%d,%g,%g,%g,%d,%d", a.Min, a.Max, a.Initial, a.Tolerance, a.Backoff, a.Growth, a.Window, a.MinSamples)
	}
	if q := o.Queue; q != nil {
		fmt.Fprintf(&b, "\x00%d,%d,%d", q.Total, q.PerTenant, q.MaxWait)
	}
	o.Key = b.String()
	return o
}

// MaxWait returns how long a request may wait in the queue (0 without
// one).
func (o *Overload) MaxWait() time.Duration {
	if o.Queue == nil {
		return 0
	}
	return o.Queue.MaxWait
}
