package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDashboardCost measures what an open dashboard costs the
// gateway at saturation: one floodgate serve process (the memory store,
// three limits per request, an API key with a quota) under a closed-loop
// load of 32 keep-alive clients, in alternating phases with the dashboard
// closed and open. "Open" polls as the page does: the traffic panel every
// second (only the new seconds) and the quota panel every two seconds,
// with the admin token. It reports requests/s of each and the drop.
//
//	go test -run '^$' -bench DashboardCost -benchtime 1x ./cmd/floodgate
//
// PHASE (default 5s) and ROUNDS (default 3) tune it.
func BenchmarkDashboardCost(b *testing.B) {
	phase := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("PHASE")); err == nil {
		phase = d
	}
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	cfg := consoleConfig(b, b.TempDir(), "", `  - {name: big, rate: 1000000, quota: {limit: 1000000000, period: MONTH}}`)
	p := startProc(b, "--config", cfg, "--log-level", "error")
	var key keyAnswer
	call(b, "POST", p.admin+"/api/v1/keys", "ops-token", map[string]any{"name": "bench", "plan": "big"}, &key)

	tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
	client := &http.Client{Transport: tr}
	load := func(d time.Duration, ui bool) float64 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var n atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, "GET", p.gw+"/partner/x", nil)
					req.Header.Set("x-api-key", key.Secret)
					resp, err := client.Do(req)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						n.Add(1)
					}
				}
			}()
		}
		if ui {
			wg.Add(1)
			go func() {
				defer wg.Done()
				poll(ctx, p.admin)
			}()
		}
		start := time.Now()
		wg.Wait()
		return float64(n.Load()) / time.Since(start).Seconds()
	}
	load(2*time.Second, false) // warm up
	var closed, open []float64
	for r := 0; r < rounds; r++ {
		closed = append(closed, load(phase, false))
		open = append(open, load(phase, true))
	}
	mc, mo := mean(closed), mean(open)
	b.ReportMetric(mc, "req/s-closed")
	b.ReportMetric(mo, "req/s-open")
	b.ReportMetric(100*(mc-mo)/mc, "%drop")
	b.Logf("dashboard closed: %v req/s; open: %v req/s", closed, open)
}

// poll asks what the open page asks until ctx ends.
func poll(ctx context.Context, admin string) {
	var until int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		q := ""
		if until > 0 {
			q = "?since=" + strconv.FormatInt(until, 10)
		}
		var ov struct {
			Until int64 `json:"until"`
		}
		if getJSON(ctx, admin+"/ui/api/overview"+q, &ov) == nil {
			until = ov.Until
		}
		if i%2 == 0 {
			_ = getJSON(ctx, admin+"/ui/api/quotas", nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func getJSON(ctx context.Context, url string, out any) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer ops-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
