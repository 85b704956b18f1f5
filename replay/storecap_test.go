package replay

import (
	"fmt"
	"testing"
	"time"
)

// TestStoreCappedAsServe attacks a replay's memory with a log of many
// distinct clients within a minute of its time (a flood of spoofed or
// scanning addresses), through a policy whose embedded store
// floodgate serve caps at server.memory.max_bytes: the replay's store
// keeps within the same cap, evicting as serve's does, instead of holding
// a counter for every client until the next sweep.
func TestStoreCappedAsServe(t *testing.T) {
	t.Parallel()
	const maxBytes = 1 << 20
	p := compilePolicy(t, fmt.Sprintf(`
server: {memory: {max_bytes: %d}}
limits:
  - {name: per-ip, rate: 5, burst: 10, key: client_ip, scope: global}
`, maxBytes))
	const clients = 40000
	reqs := make([]req, clients)
	for i := range reqs {
		reqs[i] = req{at: time.Duration(i) * time.Millisecond, ip: fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff)}
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, t.TempDir(), "flood.log", reqs)}})
	if r.Requests != clients || r.Allowed != clients {
		t.Fatalf("%d requests replayed, %d allowed; want %d, all allowed", r.Requests, r.Allowed, clients)
	}
	// The store counts at least 80 bytes a key (memstore.Options.MaxBytes).
	if k := r.Resources.PeakKeys; k > maxBytes/80 {
		t.Errorf("the replay held %d counters at once, past what server.memory.max_bytes %d holds (%d at most)", k, maxBytes, maxBytes/80)
	}
}
