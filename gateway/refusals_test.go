package gateway

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// refusalLog is a RefusalObserver that keeps what it is told.
type refusalLog struct {
	mu  sync.Mutex
	got map[string]int // "route status" → count
}

func (l *refusalLog) RefusedBeforeLimit(route string, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got[route+" "+http.StatusText(status)]++
}

// denyRoute is a Gatekeeper that refuses the requests of one route 403.
type denyRoute string

func (d denyRoute) Screen(m *Match) (int, time.Duration) {
	if m.Route == string(d) {
		return http.StatusForbidden, 0
	}
	return 0, 0
}
func (denyRoute) Outcome(context.Context, time.Duration, *Match, bool, int) {}

// TestRefusalObserver: the answers refused before any limit (the
// matcher's 401 and 403, the gatekeeper's 403) reach the RefusalObserver
// with their route; answers that pass or that a limit refuses do not.
func TestRefusalObserver(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		clock := newTestClock()
		matcher := funcMatcher(func(r *Request, m *Match) error {
			switch r.Path {
			case "/token":
				m.Route, m.Reject = "users", http.StatusUnauthorized
			case "/key":
				m.Route, m.Reject = "partner", http.StatusForbidden
			case "/denied":
				m.Route = "blocked"
			default:
				m.Route = "open"
			}
			return nil
		})
		log := &refusalLog{got: map[string]int{}}
		_, base, c := startFront(t, fr, Options{Matcher: matcher, Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{}),
			Gatekeeper: denyRoute("blocked"), Refusals: log}, func(w http.ResponseWriter, r *http.Request) {})
		for _, p := range []string{"/token", "/token", "/key", "/denied", "/ok"} {
			do(t, c, "GET", base+p, nil)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		want := map[string]int{"users Unauthorized": 2, "partner Forbidden": 1, "blocked Forbidden": 1}
		if len(log.got) != len(want) {
			t.Errorf("told %v, want %v", log.got, want)
		}
		for k, n := range want {
			if log.got[k] != n {
				t.Errorf("%s: %d, want %d (all: %v)", k, log.got[k], n, log.got)
			}
		}
	})
}
