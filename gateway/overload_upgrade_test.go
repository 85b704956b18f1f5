package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestOverloadUpgradeTeachesItsStatusLine: a request that upgrades its
// connection (a WebSocket) teaches the adaptive limit the latency to its
// 101 Switching Protocols, its status line, not the life of the tunnel
// after it: a client that holds upgraded connections open must not read
// as a slow upstream and cut the limit of everyone on the route. Its
// place is held while the tunnel lasts, as a stream's is.
func TestOverloadUpgradeTeachesItsStatusLine(t *testing.T) {
	const hold = 800 * time.Millisecond
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") != "echo" {
				_, _ = io.WriteString(w, "ok")
				return
			}
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			_ = brw.Flush()
			time.Sleep(hold) // the tunnel stays open, then the upstream ends it
		}
		g, base, c := overloadFront(t, front, overloadPolicy(learnOne), h)
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %d", resp.StatusCode)
		}
		if s := overloadState(g); s.Inflight != 1 {
			t.Errorf("while the tunnel is open: %+v; want its place held", s)
		}
		_, _ = io.Copy(io.Discard, br) // until the upstream ends the tunnel
		conn.Close()                   // and the client its side
		pollUntil(t, "the place back", func() bool { return overloadState(g).Inflight == 0 })
		// The next answers end the window of the upgrade.
		for deadline := time.Now().Add(15 * time.Second); overloadState(g).Latency == 0 && time.Now().Before(deadline); {
			if a, err := get(c, t.Context(), base+"/x"); err != nil || a.status != 200 {
				t.Fatalf("the next request: %v %v", a.status, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if s := overloadState(g); s.Latency == 0 || s.Latency >= hold/2 {
			t.Errorf("after an upgrade held %v: %+v; want the latency to its 101, not the tunnel's life", hold, s)
		}
	})
}
