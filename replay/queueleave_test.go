package replay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestQueueLeaversGiveTheirPlaceBackInAReplay attacks a replay with
// clients that leave a leaky queue before their place comes: the gateway
// gives their places back (the rate algorithms' charges are refundable)
// and logs them 499, and the requests after them take those places. The
// replay must give them back too, or it refuses what the gateway let
// through. Here a queue of one a second holding two: the first request
// passes, the next two wait a second and two, and their clients leave
// after 300 ms; two more requests then take the places they left.
func TestQueueLeaversGiveTheirPlaceBackInAReplay(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	defer up.Close()
	p := compilePolicy(t, fmt.Sprintf(`version: 1
routes:
  - {name: q, match: {paths: ["/q"]}, upstream: %q}
limits:
  - {name: queue, algorithm: leaky_queue, rate: 1, burst: 2, delay: 0, key: global, match: {routes: [q]}}
`, up.URL))
	url, log, _ := liveGateway(t, p)
	get := func(timeout time.Duration) int {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/q", nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0 // the client left
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	together := func(n int, timeout time.Duration) []int {
		codes := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); codes[i] = get(timeout) }()
		}
		wg.Wait()
		return codes
	}
	if c := get(10 * time.Second); c != http.StatusOK {
		t.Fatalf("the first request: %d, want 200", c)
	}
	together(2, 300*time.Millisecond)
	log.wait(t, 3) // the two who left are logged: their places were given back
	if codes := together(2, 10*time.Second); fmt.Sprint(codes) != "[200 200]" {
		t.Fatalf("the two requests after the clients who left: %v, want both 200", codes)
	}
	for i := 1; i < 3; i++ {
		if lr := log.get(i); lr.Status != 499 || lr.Decision.String() != "allow" {
			t.Fatalf("record %d: status %d, decision %s; want a client that left the queue (499, allow)", i+1, lr.Status, lr.Decision)
		}
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeAccessLog(t, log, 5)}})
	if r.Requests != 5 || r.Denied != 0 {
		t.Errorf("replayed %d requests, %d refused; want 5, none refused", r.Requests, r.Denied)
	}
	if a := r.Agreement; a == nil || a.Compared != 5 || a.Matched != 5 {
		t.Errorf("agreement with the log %+v: want all 5 decided as the gateway did", a)
	}
}
