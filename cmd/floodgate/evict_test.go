package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestFloodCannotResetALogin: an address that used up its login limit (5
// an hour) floods the gateway with requests from 30,000 other addresses
// through a trusted proxy, far more keys than the 1 MiB store holds. The
// store evicts the flood's own keys, not the attacker's counter: its next
// login is still answered 429 with the window's Retry-After, and no
// denying key was evicted. The login limit is a sliding log, so that a
// flood that crosses a whole hour on the wall clock does not begin the
// attacker's next window (a fixed window's would).
func TestFloodCannotResetALogin(t *testing.T) { forEngines(t, testFloodCannotResetALogin) }

func testFloodCannotResetALogin(t *testing.T, engine string) {
	cfg := writeConfig(t, `version: 1
server:
  trusted_proxies: [127.0.0.1]
  memory: {max_bytes: 1048576}
routes:
  - {name: login, match: {paths: ["/login"]}, upstream: none}
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: login, algorithm: sliding_log, limit: 5, window: 1h, key: client_ip, match: {routes: [login]}}
  - {name: per-ip, algorithm: fixed_window, limit: 100, window: 1h, key: client_ip, scope: global}
`)
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	const attacker = "192.0.2.1"
	for i := 1; i <= 5; i++ {
		if code, _, body := get(t, gw+"/login", "X-Forwarded-For", attacker); code != http.StatusNotFound {
			t.Fatalf("login %d: %d %s; want 404, charged (the route has no upstream)", i, code, body)
		}
	}
	if code, _, body := get(t, gw+"/login", "X-Forwarded-For", attacker); code != http.StatusTooManyRequests {
		t.Fatalf("login 6: %d %s; want 429", code, body)
	}

	const n = 30000
	codes := flood(t, gw, n, func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) })
	if codes[http.StatusNotFound] != n {
		t.Fatalf("flood answers %v; want all %d charged and answered 404", codes, n)
	}

	code, hdr, body := get(t, gw+"/login", "X-Forwarded-For", attacker)
	if code != http.StatusTooManyRequests {
		t.Fatalf("login 7, after the flood: %d %s; want 429, the counter kept", code, body)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 || ra > 3600 {
		t.Errorf("login 7: Retry-After %q; want 1 to 3600 seconds", hdr.Get("Retry-After"))
	}
	if v := metricFloat(t, admin, `floodgate_store_evictions_total{store="main"}`); v == 0 {
		t.Errorf("no key was evicted: the flood did not fill the store")
	}
	if v := metricFloat(t, admin, `floodgate_store_denying_evictions_total{store="main"}`); v != 0 {
		t.Errorf("%v denying keys were evicted; want 0", v)
	}
}

// flood sends n requests for /x to gw, 8 at a time over kept-alive
// connections, the i-th forwarded for the address addr(i), and counts
// their answers by status (0 for a request that failed).
func flood(t *testing.T, gw string, n int, addr func(i int) string) map[int]int {
	t.Helper()
	const workers = 8
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for w := range workers {
		wg.Go(func() {
			mine := map[int]int{}
			for i := w; i < n; i += workers {
				req, _ := http.NewRequest("GET", gw+"/x", nil)
				req.Header.Set("X-Forwarded-For", addr(i))
				resp, err := client.Do(req)
				if err != nil {
					mine[0]++
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mine[resp.StatusCode]++
			}
			mu.Lock()
			for c, k := range mine {
				codes[c] += k
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}
