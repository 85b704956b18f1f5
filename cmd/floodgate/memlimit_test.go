package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/app"
)

// metricFloat reads one sample of /metrics, in whatever notation it is
// written.
func metricFloat(t *testing.T, admin, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, admin), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s on /metrics", series)
	return 0
}

// gomemlimit reads the runtime's soft memory limit from /metrics.
func gomemlimit(t *testing.T, admin string) float64 {
	t.Helper()
	return metricFloat(t, admin, "go_gc_gomemlimit_bytes")
}

// TestServeSetsASoftMemoryLimit: floodgate serve, a process of its own,
// sets the runtime's soft memory limit from server.memory.max_bytes, not
// with soft_limit: off, and leaves GOMEMLIMIT's when it is set.
func TestServeSetsASoftMemoryLimit(t *testing.T) {
	const capBytes = 64 << 20
	policy := func(mode string) string {
		return writeConfig(t, fmt.Sprintf(`version: 1
server:
  memory: {max_bytes: %d, soft_limit: %s}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
`, capBytes, mode))
	}
	args := []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error"}
	p := startProc(t, append([]string{"--config", policy("auto")}, args...)...)
	lo := float64(capBytes + capBytes/10 + app.SoftLimitFloor)
	if got := gomemlimit(t, p.admin); got < lo || got > lo+64<<20 {
		t.Errorf("soft_limit auto, max_bytes 64 MiB: GOMEMLIMIT %.0f, want %.0f and what the rest of the process holds (not 64 MiB more)", got, lo)
	}
	p = startProc(t, append([]string{"--config", policy("off")}, args...)...)
	if got := gomemlimit(t, p.admin); got != math.MaxInt64 {
		t.Errorf("soft_limit off: GOMEMLIMIT %.0f, want none (%d)", got, int64(math.MaxInt64))
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	p = startProc(t, append([]string{"--config", policy("auto")}, args...)...)
	if got := gomemlimit(t, p.admin); got != 100<<20 {
		t.Errorf("GOMEMLIMIT=100MiB: the limit is %.0f, want GOMEMLIMIT's", got)
	}
}

// procStatus returns a size in bytes from /proc/PID/status (VmHWM, VmRSS).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestFloodRSSWithinCap: a floodgate serve process with a 16 MiB store is
// flooded with twice as many client addresses as the store holds keys,
// and its resident memory at its peak (VmHWM) grows past its baseline, the
// peak under the same requests from 64 addresses, by at most a tenth more
// than the cap. Left to GOGC, the garbage of the evicted keys took it
// past that by half the cap again. It measures the process as it runs
// without the race detector, whose shadow memory grows with the heap and
// lies outside any Go memory limit.
func TestFloodRSSWithinCap(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector's shadow memory is outside the soft memory limit; run without -race")
	}
	const capBytes = 16 << 20
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  trusted_proxies: [127.0.0.1]
  memory: {max_bytes: %d}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 100, window: 1h, key: client_ip, scope: global}
`, capBytes))
	p := startProc(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	pid := p.cmd.Process.Pid
	addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }
	// The baseline: the same requests, from few addresses.
	const warm = 60000
	flood(t, p.gw, warm, func(i int) string { return addr(1<<23 + i%64) })
	base := procStatus(t, pid, "VmHWM")
	n := 2 * capBytes / 100 // about twice the keys that fit
	codes := flood(t, p.gw, n, addr)
	if codes[http.StatusNotFound] != n {
		t.Fatalf("flood answers %v; want all %d charged and answered 404", codes, n)
	}
	if v := metricFloat(t, p.admin, `floodgate_store_evictions_total{store="main"}`); v == 0 {
		t.Fatalf("no key was evicted: the flood did not fill the store")
	}
	peak := procStatus(t, pid, "VmHWM")
	t.Logf("VmHWM %.1f MiB after %d requests from 64 addresses, %.1f MiB after %d from as many: %.2f of the cap more",
		float64(base)/(1<<20), warm, float64(peak)/(1<<20), n, float64(peak-base)/capBytes)
	if peak > base+capBytes+capBytes/10 {
		t.Errorf("peak resident memory %d, more than the baseline %d and 110%% of the cap %d", peak, base, capBytes)
	}
}
