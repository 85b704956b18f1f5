package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The configurations each case runs with.
const (
	configNone     = "none"     // a plain route: no overload control
	configFixed    = "fixed"    // a fixed cap on requests in flight
	configAdaptive = "adaptive" // the adaptive limit
)

// overloadSettings are the overload block's values for the fixed and
// adaptive configurations.
type overloadSettings struct {
	limit                     int // fixed
	min, max, initial         int // adaptive
	queueSize, queuePerTenant int
	queueWait                 time.Duration
}

// policy is the policy file of configuration kind in front of upstream.
func policy(kind, upstream string, o overloadSettings) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version: 1
server:
  trusted_proxies: ["127.0.0.1/32"]
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: %s
`, upstream)
	if kind == configNone {
		return b.String()
	}
	b.WriteString("    overload:\n")
	if kind == configFixed {
		fmt.Fprintf(&b, "      limit: %d\n", o.limit)
	} else {
		fmt.Fprintf(&b, "      adaptive: {min: %d, max: %d, initial: %d}\n", o.min, o.max, o.initial)
	}
	fmt.Fprintf(&b, `      queue: {size: %d, per_tenant: %d, max_wait: %s}
      tenant: header:X-Tenant
      tiers:
        - {name: critical, reserve: 0.2}
        - {name: default, reserve: 0.1}
        - {name: sheddable}
      tier: default
      tier_header: X-Priority
`, o.queueSize, o.queuePerTenant, o.queueWait)
	return b.String()
}

// gateway is one floodgate serve process.
type gateway struct {
	cmd    *exec.Cmd
	url    string // the gateway's base URL
	admin  string // the admin listener's base URL
	stderr *syncBuffer
	done   chan error
}

// startGateway runs bin serve with the policy file at path, on free
// loopback ports, and waits until /readyz answers 200.
func startGateway(ctx context.Context, bin, path string) (*gateway, error) {
	g := &gateway{stderr: &syncBuffer{}, done: make(chan error, 1)}
	g.cmd = exec.Command(bin, "serve", "--config", path, "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--ops-listen", "off", "--log-level", "warn", "--watch=false", "--shutdown-timeout", "2s")
	g.cmd.Stderr = g.stderr
	stopWithParent(g.cmd)
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		g.done <- g.cmd.Wait()
	}()
	deadline := time.After(30 * time.Second)
	for g.admin == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				return nil, fmt.Errorf("floodgate serve ended: %s", g.stderr.tail())
			}
			if f := strings.Fields(line); len(f) >= 4 && f[0] == "floodgate:" && f[2] == "on" {
				switch f[1] {
				case "gateway":
					g.url = f[3]
				case "admin":
					g.admin = f[3]
				}
			}
		case <-deadline:
			g.stop()
			return nil, errors.New("floodgate serve printed no admin address within 30s: " + g.stderr.tail())
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		}
	}
	if g.url == "" {
		g.stop()
		return nil, errors.New("floodgate serve printed no gateway address")
	}
	for i := 0; ; i++ {
		resp, err := http.Get(g.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g, nil
			}
		}
		if i == 200 {
			g.stop()
			return nil, errors.New("floodgate serve is not ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop asks the process to end (SIGTERM) and kills it if it has not ended
// within 5 s.
func (g *gateway) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// sample is one scrape of the overload gauges (NaN where absent), with
// what the upstream saw.
type sample struct {
	at                      time.Duration
	limit, inflight, queued float64
	upstream                int64 // the most requests the upstream held at once since the last sample
}

// scrape reads /metrics and returns every sample of the families named by
// prefix: the metric with its labels as written, and the value.
func scrape(client *http.Client, admin, prefix string) (map[string]float64, error) {
	resp, err := client.Get(admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseMetrics(body, prefix), nil
}

// parseMetrics picks the samples of the metrics whose name starts with
// prefix from a Prometheus text exposition.
func parseMetrics(body []byte, prefix string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// gauge is the value of the metric name (with any labels), or NaN.
func gauge(m map[string]float64, name string) float64 {
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			return v
		}
	}
	return nan
}

// writePolicy writes a policy file into dir and returns its path.
func writePolicy(dir, name, text string) (string, error) {
	path := filepath.Join(dir, name+".yaml")
	return path, os.WriteFile(path, []byte(text), 0o600)
}

// syncBuffer keeps a process's standard error for its error messages.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.buf.String())
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
