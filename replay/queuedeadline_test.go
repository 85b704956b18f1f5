package replay

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestQueuePastWriteTimeoutReplayedAsRefused attacks a replay with a
// leaky queue that delays requests (no nodelay) under
// server.timeouts.write: the gateway refuses at once (429) a request
// whose place would come after its answer could be written, and gives
// its place back; a replay must refuse it too, not queue it and let it
// through. Here a queue of one per 2 s under a write timeout of 400 ms,
// through a gateway on loopback whose server has that timeout: the first
// request passes, the two after it would wait about 2 s and are refused.
func TestQueuePastWriteTimeoutReplayedAsRefused(t *testing.T) {
	const write = 400 * time.Millisecond
	p := compilePolicy(t, fmt.Sprintf(`version: 1
server: {timeouts: {write: %s}}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %q}
limits:
  - {name: queue, algorithm: leaky_queue, rate: 1, per: 2s, burst: 3, key: global}
`, write, okUpstream(t)))
	url, log, _ := liveGatewayServer(t, p, func(s *http.Server) { s.WriteTimeout = write })
	sendAnswered(t, log, "[200 429 429]", []*http.Request{newGet(t, url+"/x"), newGet(t, url+"/x"), newGet(t, url+"/x")})
	r := mustRun(t, Options{Policy: p, Logs: []string{writeAccessLog(t, log, 3)}})
	if r.Allowed != 1 || r.Denied != 2 {
		t.Errorf("replayed: %d allowed, %d denied; want 1 allowed and the 2 queued past the write timeout refused", r.Allowed, r.Denied)
	}
	if a := r.Agreement; a == nil || a.Compared != 3 || a.Matched != 3 {
		t.Errorf("agreement with the log %+v: want all 3 decided as the gateway did", a)
	}
}
