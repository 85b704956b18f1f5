package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/client"
)

// attemptCounter counts the attempts a client sends and those answered
// 429.
type attemptCounter struct {
	base          http.RoundTripper
	sent, refused atomic.Int64
}

func (c *attemptCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	resp, err := c.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.refused.Add(1)
	}
	return resp, err
}

func (c *attemptCounter) share() float64 {
	if n := c.sent.Load(); n > 0 {
		return float64(c.refused.Load()) / float64(n)
	}
	return 0
}

// TestClientPacingAgainstServe measures, against floodgate serve with a
// limit of 10 a second (a token bucket with a burst of 10) per client,
// the share of the requests a client sends that meet a 429: three
// clients at once, each four goroutines sending one request after
// another (10ms apart) for 4 seconds, each with its own key: one paced by
// a client.Pacer, one that only retries after a 429 (client.RetryTransport
// without a Pacer), one that does neither.
func TestClientPacingAgainstServe(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: ten
    match: {paths: ["/**"]}
    algorithm: token_bucket
    rate: 10
    per: 1s
    burst: 10
    key: header:X-Client
`, up.URL))
	gw, _, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")

	base := func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(tr.CloseIdleConnections)
		return tr
	}
	paced := &attemptCounter{base: base()}
	retrying := &attemptCounter{base: base()}
	bare := &attemptCounter{base: base()}
	pacer := client.NewPacer(client.PacerOptions{})
	clients := []struct {
		name    string
		counter *attemptCounter
		hc      *http.Client
	}{
		{"paced", paced, &http.Client{Transport: &client.RetryTransport{Base: paced, Pacer: pacer}}},
		{"retrying", retrying, &http.Client{Transport: &client.RetryTransport{Base: retrying}}},
		{"bare", bare, &http.Client{Transport: bare}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gw+"/items", nil)
					req.Header.Set("X-Client", c.name)
					if resp, err := c.hc.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			})
		}
	}
	wg.Wait()
	for _, c := range clients {
		t.Logf("%-8s sent %4d requests, %4d answered 429 (%.1f%%)", c.name, c.counter.sent.Load(), c.counter.refused.Load(), 100*c.counter.share())
	}
	s := pacer.Stats()
	t.Logf("paced: %d held for %s in all, %d not sent (their wait went past the run's end)", s.Held, s.HeldFor, s.Refused)
	if got := paced.share(); got > 0.05 {
		t.Errorf("the paced client sent %.1f%% of its requests into a 429, want at most 5%%", 100*got)
	}
	if ok := paced.sent.Load() - paced.refused.Load(); ok < 10 {
		t.Errorf("the paced client got %d requests through, want at least the burst of 10", ok)
	}
	if retrying.share() <= paced.share() || bare.share() <= paced.share() {
		t.Errorf("the clients without pacing met 429s no more often than the paced one: the test does not load the limit")
	}
}
