package replay

import (
	"testing"
	"time"
)

// TestLongRequestKeepsItsSlot attacks a replay with a request that runs
// longer than its concurrency limit's lease_ttl (1m by default): the
// gateway renews the lease of a request in flight until it ends, so the
// slot stays taken; a replay must hold it as long, not let it lapse at
// the lease's lifetime and admit the requests the gateway refused.
func TestLongRequestKeepsItsSlot(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: slots, algorithm: concurrency, limit: 1, key: client_ip}
`)
	ip := "192.0.2.1"
	reqs := []req{
		{at: 0, ip: ip, dur: 5 * time.Minute},     // a long download
		{at: 2 * time.Minute, ip: ip},             // its slot still held: denied
		{at: 5*time.Minute + time.Second, ip: ip}, // it ended: allowed
	}
	r := mustRun(t, Options{Policy: p, Window: 10 * time.Minute, Logs: []string{writeLog(t, t.TempDir(), "a.log", byEnd(reqs))}})
	if r.Late != 0 || r.Allowed != 2 || r.Denied != 1 {
		t.Fatalf("%d allowed, %d denied (%d late); want 2 allowed and the request during the long one denied: %+v",
			r.Allowed, r.Denied, r.Late, limitReport(t, r, "slots"))
	}
}
