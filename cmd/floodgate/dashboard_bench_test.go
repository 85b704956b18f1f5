package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
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
// with the admin token. It reports requests/s and the serve process's CPU
// time per request of each, and the drop.
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
	type result struct{ rps, cpuPerReq float64 }
	load := func(d time.Duration, ui bool) result {
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
		start, cpu0 := time.Now(), procCPU(b, p.cmd.Process.Pid)
		wg.Wait()
		cpu := procCPU(b, p.cmd.Process.Pid) - cpu0
		return result{rps: float64(n.Load()) / time.Since(start).Seconds(), cpuPerReq: cpu.Seconds() * 1e6 / float64(n.Load())}
	}
	// The polling's own cost, with no traffic: the process's CPU time per
	// second with the page open, less without it.
	idle := func(ui bool) float64 {
		ctx, cancel := context.WithTimeout(context.Background(), phase)
		defer cancel()
		cpu0, start := procCPU(b, p.cmd.Process.Pid), time.Now()
		if ui {
			poll(ctx, p.admin)
		} else {
			<-ctx.Done()
		}
		return (procCPU(b, p.cmd.Process.Pid) - cpu0).Seconds() * 1000 / time.Since(start).Seconds()
	}
	idleClosed, idleOpen := idle(false), idle(true)
	b.ReportMetric(idleOpen-idleClosed, "poll-cpu-ms/s")
	load(2*time.Second, false) // warm up
	var closed, open []result
	for r := 0; r < rounds; r++ {
		closed = append(closed, load(phase, false))
		open = append(open, load(phase, true))
	}
	var rc, ro, cc, co []float64
	for i := range closed {
		rc, ro = append(rc, closed[i].rps), append(ro, open[i].rps)
		cc, co = append(cc, closed[i].cpuPerReq), append(co, open[i].cpuPerReq)
	}
	b.ReportMetric(mean(rc), "req/s-closed")
	b.ReportMetric(mean(ro), "req/s-open")
	b.ReportMetric(mean(cc), "cpu-µs/req-closed")
	b.ReportMetric(mean(co), "cpu-µs/req-open")
	// At saturation the gateway is bound by its CPU, so its throughput
	// falls as its CPU per request grows; this estimate does not move with
	// the load of other programs on the machine, the measured req/s do.
	b.ReportMetric(100*(1-mean(cc)/mean(co)), "%drop-cpu")
	b.ReportMetric(100*(mean(rc)-mean(ro))/mean(rc), "%drop-req/s")
	b.Logf("closed: %v\nopen:   %v", closed, open)
}

// procCPU returns the CPU time (user and system) of a process so far.
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 a second).
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
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
