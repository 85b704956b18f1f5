package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// nginxLimitReq is NGINX's limit_req arithmetic as read in
// ngx_http_limit_req_module.c, for a rate of r requests a second: excess in
// milli-requests, time in milliseconds, state written only when the request
// is not rejected.
type nginxLimitReq struct {
	rate, burst, delay int64 // rate in milli-requests/s; burst, delay ×1000
	excess, last       int64
	seen               bool
}

// take returns whether the request passes and its delay in ms.
func (n *nginxLimitReq) take(nowMs int64) (bool, int64) {
	excess := int64(0) // a new node starts at 0 (the lookup creates it so)
	if n.seen {
		excess = n.excess - n.rate*(nowMs-n.last)/1000 + 1000
		if excess < 0 {
			excess = 0
		}
	}
	if excess > n.burst {
		return false, 0
	}
	n.excess, n.last, n.seen = excess, nowMs, true
	if excess <= n.delay {
		return true, 0
	}
	return true, (excess - n.delay) * 1000 / n.rate
}

// TestLeakyQueueMatchesNginx replays random millisecond traces through the
// leaky queue and through NGINX's own integer arithmetic: with a whole
// number of requests a second and millisecond instants NGINX's excess is
// exact, so admission must agree on every request and the delay must agree
// to the millisecond (NGINX truncates it to whole ms; ours is rounded up to
// whole ns, which cannot cross a millisecond for rates below 10⁶/s).
func TestLeakyQueueMatchesNginx(t *testing.T) {
	t.Parallel()
	for ci, c := range []struct{ rate, burst, delay int64 }{
		{1, 5, 0}, {1, 5, floodgate.NoDelay}, {1, 12, 8}, {3, 0, 0}, {7, 20, 3}, {10, 10, 10}, {300, 50, 0},
	} {
		l := floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: c.rate, Per: time.Second, Burst: c.burst, Delay: c.delay}
		p := mustCompile(t, l)
		ng := nginxLimitReq{rate: c.rate * 1000, burst: c.burst * 1000, delay: c.delay * 1000}
		if c.delay == floodgate.NoDelay {
			ng.delay = 1 << 62
		}
		rng := rand.New(rand.NewPCG(uint64(ci), 11))
		var s State
		rejected, delayed := 0, 0
		nowMs := int64(1_700_000_000_000)
		for i := range 20_000 {
			if rng.IntN(3) > 0 {
				nowMs += rng.Int64N(2 * 1000 / c.rate)
			}
			d, err := p.Decide(&s, Request{Now: nowMs * int64(time.Millisecond), Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			ok, delayMs := ng.take(nowMs)
			if d.Allowed != ok || int64(d.Delay/time.Millisecond) != delayMs {
				t.Fatalf("%+v request %d at %d ms: floodgate %v delay %v, nginx %v delay %d ms",
					c, i, nowMs, d.Allowed, d.Delay, ok, delayMs)
			}
			if !ok {
				rejected++
			} else if delayMs > 0 {
				delayed++
			}
		}
		if rejected == 0 || (delayed == 0 && c.delay != floodgate.NoDelay && c.delay < c.burst) {
			t.Errorf("%+v: %d rejected, %d delayed: the trace misses a branch", c, rejected, delayed)
		}
	}
}
