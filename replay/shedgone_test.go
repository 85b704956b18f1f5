package replay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestShedClientGoneGivesItsChargesBackInAReplay attacks a replay with a
// client that leaves its route's overload queue: the gateway gives back
// what its limits charged it (shed client_gone, logged 499), so a request
// after it passes the limit it would otherwise have found spent. A replay
// does not simulate the overload queue, but it must shed the request as
// the log says, charges included. Here a global bucket of two that does
// not refill, in front of a route that takes one request at a time: a slow
// request holds the place, a second waits for it and its client leaves
// after 300 ms, and a third then passes the bucket and waits its turn.
func TestShedClientGoneGivesItsChargesBackInAReplay(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		io.WriteString(w, "ok\n")
	}))
	defer up.Close()
	p := compilePolicy(t, fmt.Sprintf(`version: 1
routes:
  - {name: one, match: {paths: ["/**"]}, upstream: %q, overload: {limit: 1, queue: {size: 4, max_wait: 1m}}}
limits:
  - {name: bucket, rate: 1, per: 1h, burst: 2, key: global}
`, up.URL))
	url, log, g := liveGateway(t, p)
	get := func(path string, timeout time.Duration) int {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
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
	slow := make(chan int, 1)
	go func() { slow <- get("/slow", time.Minute) }()
	third := make(chan int, 1)
	func() {
		defer close(release)
		<-arrived // the slow request holds the route's place
		get("/left", 300*time.Millisecond)
		log.wait(t, 1) // the client who left is logged: its charges were given back
		go func() { third <- get("/third", time.Minute) }()
		// The third request passed its limits and waits for the place.
		o := p.Routes()[0].Overload
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if s, _ := g.OverloadOf(o); s.Queued == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the third request never waited for the route's place")
			}
		}
	}()
	if a, c := <-slow, <-third; a != http.StatusOK || c != http.StatusOK {
		t.Fatalf("the slow request answered %d and the third %d, want both 200", a, c)
	}
	if lr := log.get(0); lr.Status != 499 || lr.Shed != "client_gone" {
		t.Fatalf("the first record: status %d, shed %q; want the client that left the queue (499, client_gone)", lr.Status, lr.Shed)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeAccessLog(t, log, 3)}})
	if r.Requests != 3 || r.Denied != 0 {
		t.Errorf("replayed %d requests, %d refused; want 3, none refused", r.Requests, r.Denied)
	}
	if a := r.Agreement; a == nil || a.Compared != 3 || a.Matched != 3 || a.Shed != 1 {
		t.Errorf("agreement with the log %+v: want all 3 decided as the gateway did, one shed", a)
	}
}
