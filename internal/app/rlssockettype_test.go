package app

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRLSEnvSocketTypeFamilies: REDIS_SOCKET_TYPE=tcp4 and tcp6, which
// envoyproxy/ratelimit hands to Go's dialer for a single instance, are
// taken, and dial over that family of addresses only, as there: on a Redis
// listening on 127.0.0.1 and ::1, tcp4 reaches it by 127.0.0.1 and not by
// ::1, tcp6 the other way round, tcp by both. A cluster's, which the peer
// does not read, is taken too. Before, floodgate rls refused both at the
// start ("want tcp or unix").
func TestRLSEnvSocketTypeFamilies(t *testing.T) {
	// A machine without an IPv6 loopback runs the cases of 127.0.0.1:
	// tcp6 must still not reach it.
	binds := []string{"--bind", "127.0.0.1"}
	ipv6 := false
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ln.Close()
		binds, ipv6 = append(binds, "::1"), true
	}
	srv, err := redistest.StartServer(redistest.Config{Dir: t.TempDir(), Args: binds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	_, port, _ := net.SplitHostPort(srv.Addr)
	v4, v6 := net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)
	type dialCase struct {
		socket, url string
		reached     bool
	}
	cases := []dialCase{
		{"tcp4", v4, true}, {"tcp6", v4, false}, {"tcp", v4, true},
		{"TCP4", "redis://" + v4, true}, {"tcp6", "redis://" + v4, false},
	}
	if ipv6 {
		cases = append(cases, dialCase{"tcp4", v6, false}, dialCase{"tcp6", v6, true}, dialCase{"tcp", v6, true})
	}
	for _, c := range cases {
		e, _, err := readRLSEnv(envOf(map[string]string{"REDIS_SOCKET_TYPE": c.socket, "REDIS_URL": c.url, "REDIS_TIMEOUT": "2s"}))
		if err != nil {
			t.Fatalf("%s to %s: %v", c.socket, c.url, err)
		}
		set, err := e.settings()
		if err != nil {
			t.Fatalf("%s to %s: %v", c.socket, c.url, err)
		}
		// The store opens whether or not Redis answers, and says so.
		var log syncBuffer
		st, err := openStores(context.Background(), set.Store, slog.New(slog.NewTextHandler(&log, nil)))
		if err != nil {
			t.Fatalf("%s to %s: %v", c.socket, c.url, err)
		}
		st.close()
		reached := !strings.Contains(log.String(), "Redis does not answer yet")
		if reached != c.reached {
			t.Errorf("%s to %s: reached %v, want %v; the log:\n%s", c.socket, c.url, reached, c.reached, log.String())
		}
		if !reached && !strings.Contains(log.String(), "dial "+strings.ToLower(c.socket)) {
			t.Errorf("%s to %s: the log does not name the family:\n%s", c.socket, c.url, log.String())
		}
	}
	for _, typ := range []string{"cluster", "sentinel"} {
		url := map[string]string{"cluster": "a:7000,b:7000", "sentinel": "m,s1:26379"}[typ]
		if _, _, err := readRLSEnv(envOf(map[string]string{"REDIS_SOCKET_TYPE": "tcp4", "REDIS_TYPE": typ, "REDIS_URL": url})); err != nil {
			t.Errorf("tcp4 with REDIS_TYPE=%s: %v", typ, err)
		}
	}
}
