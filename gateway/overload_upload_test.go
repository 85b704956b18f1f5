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

// TestOverloadSlowUploadTeachesNothingOfTheUpstream: a client that sends
// its body slowly makes the upstream's status line late by its own pace,
// not by the upstream's load: the adaptive limit must not learn that wait
// as the upstream's latency, or one client dribbling its uploads would read
// as a queueing upstream and cut the limit of every tenant on the route.
func TestOverloadSlowUploadTeachesNothingOfTheUpstream(t *testing.T) {
	const pieces, gap = 8, 100 * time.Millisecond // 800 ms of upload
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok")
		}
		g, base, c := overloadFront(t, front, overloadPolicy(learnOne), h)
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		for range pieces {
			time.Sleep(gap)
			if _, err := io.WriteString(conn, "x"); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("upload: %d", resp.StatusCode)
		}
		pollUntil(t, "the place back", func() bool { return overloadState(g).Inflight == 0 })
		for deadline := time.Now().Add(15 * time.Second); overloadState(g).Latency == 0 && time.Now().Before(deadline); {
			if a, err := get(c, t.Context(), base+"/x"); err != nil || a.status != 200 {
				t.Fatalf("the next request: %v %v", a.status, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if s := overloadState(g); s.Latency == 0 || s.Latency >= pieces*gap/2 {
			t.Errorf("after an upload sent over %v: %+v; want the upstream's latency, not the client's pace", pieces*gap, s)
		}
	})
}
