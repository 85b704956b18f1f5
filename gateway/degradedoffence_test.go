package gateway

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/redisstore"
)

// refusalKeeper is a Gatekeeper that lets everything through and keeps
// the identities of each refusal it is told of (what a penalty box
// counts offences of).
type refusalKeeper struct {
	mu  sync.Mutex
	got []policy.Identities
}

func (k *refusalKeeper) Screen(*Match) (int, time.Duration) { return 0, 0 }

func (k *refusalKeeper) Outcome(_ context.Context, _ time.Duration, m *Match, refused bool, _ int) {
	if refused {
		k.mu.Lock()
		k.got = append(k.got, m.RefusedBy)
		k.mu.Unlock()
	}
}

func (k *refusalKeeper) refusals() []policy.Identities {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]policy.Identities(nil), k.got...)
}

// TestDegradedRefusalIsNoOffence: a per-address limit that fails closed
// refuses while its store does not answer, but that refusal is the
// store's, not the client's, and the gatekeeper is told it is no one's
// (a penalty box counted it as the client's offence, and banned clients
// for an outage); once Redis answers, a refusal by the same limit is the
// client's address's again.
func TestDegradedRefusalIsNoOffence(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		srv := redistest.Start(t)
		srv.Stop()
		store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr, DialTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		p := compilePolicy(t, "p.yaml", `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: http://127.0.0.1:9}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 1, key: client_ip, on_failure: deny}
`)
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k := &refusalKeeper{}
		_, base, c := startFront(t, fr, Options{Matcher: pm, Gatekeeper: k,
			Engine: limiter.New(store, limiter.Options{Timeout: 200 * time.Millisecond})}, func(w http.ResponseWriter, r *http.Request) {})
		for i := range 3 {
			if st := do(t, c, "GET", base+"/", nil).status; st != http.StatusTooManyRequests {
				t.Fatalf("request %d with the store down: %d; want 429 (on_failure: deny)", i, st)
			}
		}
		pollUntil(t, "the outcomes of the refusals", func() bool { return len(k.refusals()) == 3 })
		for i, by := range k.refusals() {
			if by != 0 {
				t.Errorf("refusal %d by the failure policy told as an offence of %b; want none", i, by)
			}
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		// Once Redis answers: one request allowed, then refused by the
		// client's own limit.
		pollUntil(t, "a refusal counted in Redis", func() bool {
			do(t, c, "GET", base+"/", nil)
			got := k.refusals()
			return len(got) > 3 && got[len(got)-1] == policy.IdentityClientIP
		})
	})
}
