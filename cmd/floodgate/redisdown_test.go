package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestServeStartsWhileRedisIsDown: floodgate serve started while its
// Redis does not answer (a restart or a new replica during an outage)
// serves, each limit deciding by its on_failure, and says it is degraded
// in /readyz; once Redis answers, the limits count there. serve used to
// stop at its start ("redisstore: connect"), so that an outage took every
// gateway that restarted down with it, whatever the failure policies said.
func TestServeStartsWhileRedisIsDown(t *testing.T) { forEngines(t, testServeStartsWhileRedisIsDown) }

func testServeStartsWhileRedisIsDown(t *testing.T, engine string) {
	rs := redistest.Start(t)
	rs.Stop() // its port is known and nothing listens there
	up := newUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`server:
  store: redis://%s/0
  admin:
    tokens: [{name: ops, sha256: %q}]
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, on_failure: allow}
`, rs.Addr, sha256Hex("ops-token"), up))
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--log-level", "error")
	// Enough requests for the circuit breaker to open (20 failures in a
	// row), each passed by its limit's on_failure.
	for i := range 25 {
		if st, _, _ := fetchURL(t, gw+"/", nil); st != 200 {
			t.Fatalf("request %d with Redis down: %d; want 200 (on_failure: allow)", i, st)
		}
	}
	waitUntil(t, "/readyz to say the store is down", 10*time.Second, func() bool {
		code, _, body := get(t, admin+"/readyz")
		return code == 200 && strings.HasPrefix(body, "degraded: ")
	})
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	// The bucket of 2 is Redis' once it answers: a refusal comes.
	waitUntil(t, "a refusal of the limit counted in Redis", 30*time.Second, func() bool {
		st, _, _ := fetchURL(t, gw+"/", nil)
		return st == 429
	})
	waitUntil(t, "/readyz to say ready", 30*time.Second, func() bool {
		code, _, body := get(t, admin+"/readyz")
		return code == 200 && body == "ready\n"
	})
}

// TestServeStartsWhileRedisIsFull: the same with a Redis that holds
// maxclients connections already, as when the pods of a rollout start
// before the old ones have left: it accepts each connection, says "max
// number of clients reached" and closes it. serve stopped at its start
// ("redisstore: connect ...: EOF"); it serves by on_failure now, and the
// limit counts in Redis once a connection is free.
func TestServeStartsWhileRedisIsFull(t *testing.T) {
	rs, err := redistest.StartServer(redistest.Config{Dir: t.TempDir(), Args: []string{"--maxclients", "8"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)
	var held []net.Conn
	release := func() {
		for _, c := range held {
			c.Close()
		}
		held = nil
	}
	t.Cleanup(release)
	buf := make([]byte, 128)
	for full := false; !full; {
		if len(held) > 100 {
			t.Fatal("Redis took 100 connections and refused none")
		}
		c, err := net.DialTimeout("tcp", rs.Addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		full = strings.HasPrefix(string(buf[:n]), "-ERR max number of clients reached")
	}
	up := newUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`server:
  store: redis://%s/0
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, on_failure: allow}
`, rs.Addr, up))
	gw, _, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	for i := range 5 {
		if st, _, _ := fetchURL(t, gw+"/", nil); st != 200 {
			t.Fatalf("request %d with Redis full: %d; want 200 (on_failure: allow)", i, st)
		}
	}
	release()
	waitUntil(t, "a refusal of the limit counted in Redis", 30*time.Second, func() bool {
		st, _, _ := fetchURL(t, gw+"/", nil)
		return st == 429
	})
}

// TestServeStartsWhileClusterIsDown: the same with a Redis Cluster none of
// whose nodes answers when serve starts: it serves by on_failure, and once
// the nodes are back its client is made in the background and the limit
// counts in the Cluster. serve used to stop at its start ("redisstore:
// connect"), as it did for a standalone Redis before.
func TestServeStartsWhileClusterIsDown(t *testing.T) {
	cl, err := redistest.NewCluster("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	stopAll := func(f func(*redistest.Server) error) {
		errs := make(chan error, len(cl.Nodes))
		for _, n := range cl.Nodes {
			go func() { errs <- f(n) }()
		}
		for range cl.Nodes {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	stopAll(func(n *redistest.Server) error { n.Stop(); return nil }) // their ports are known and nothing listens there
	up := newUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`server:
  store: redis+cluster://%s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, on_failure: allow}
`, strings.Join(cl.Addrs(), ","), up))
	gw, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--log-level", "error")
	for i := range 25 {
		if st, _, _ := fetchURL(t, gw+"/", nil); st != 200 {
			t.Fatalf("request %d with the Cluster down: %d; want 200 (on_failure: allow)", i, st)
		}
	}
	waitUntil(t, "/readyz to say the store is down", 10*time.Second, func() bool {
		code, _, body := get(t, admin+"/readyz")
		return code == 200 && strings.HasPrefix(body, "degraded: ")
	})
	stopAll((*redistest.Server).Restart)
	waitUntil(t, "a refusal of the limit counted in the Cluster", 60*time.Second, func() bool {
		st, _, _ := fetchURL(t, gw+"/", nil)
		return st == 429
	})
	waitUntil(t, "/readyz to say ready", 30*time.Second, func() bool {
		code, _, body := get(t, admin+"/readyz")
		return code == 200 && body == "ready\n"
	})
}
