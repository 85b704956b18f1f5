package console

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/penalty"
	"github.com/floodgate/floodgate/policy"
)

// offences is a penalty.Backend that keeps the bans in memory and
// records the context of each offence it is asked to count.
type offences struct {
	penalty.Backend
	mu   sync.Mutex
	ctxs []context.Context
	errs []error // each context's Err when the offence was counted
}

func (o *offences) Offend(ctx context.Context, r *config.Ban, key string) (*penalty.Ban, error) {
	o.mu.Lock()
	o.ctxs = append(o.ctxs, ctx)
	o.errs = append(o.errs, ctx.Err())
	o.mu.Unlock()
	return o.Backend.Offend(ctx, r, key)
}

// TestKeeperBoundsItsOutcomes: without penalty-box rules an outcome asks
// the backend nothing; with them, an offence is counted under a deadline
// no later than the bound given, also when the request's own context has
// ended (its client left).
func TestKeeperBoundsItsOutcomes(t *testing.T) {
	be := &offences{Backend: penalty.NewMemory(0, nil)}
	rule := config.Ban{Name: "flood", Key: config.BanKeyClientIP, After: 3, Within: time.Minute,
		Ban: time.Minute, MaxBan: 5 * time.Minute, Growth: 2}
	m := &gateway.Match{ClientKey: "10.0.0.1", RefusedBy: policy.IdentityClientIP} // refused by a per-address limit
	gone, leave := context.WithCancel(context.Background())
	leave()

	for _, rules := range [][]config.Ban{nil, {rule}} {
		box, err := penalty.New(rules, penalty.Options{Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		k := &Keeper{box: box}
		before := time.Now()
		k.Outcome(gone, time.Second, m, true, 429)
		box.Close()
		be.mu.Lock()
		n := len(be.ctxs)
		var ctx context.Context
		var cerr error
		if n > 0 {
			ctx, cerr = be.ctxs[n-1], be.errs[n-1]
		}
		be.mu.Unlock()
		if len(rules) == 0 {
			if n != 0 {
				t.Fatalf("%d offences counted without rules", n)
			}
			continue
		}
		if n != 1 {
			t.Fatalf("%d offences counted, want 1", n)
		}
		dl, ok := ctx.Deadline()
		if !ok || dl.After(before.Add(time.Second+100*time.Millisecond)) {
			t.Fatalf("offence counted with deadline %v (set: %v), want within 1 s of %v", dl, ok, before)
		}
		if cerr != nil {
			t.Fatalf("the offence's context had ended with the request's: %v", cerr)
		}
	}
}
