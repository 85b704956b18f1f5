package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestUpstreamAnswersBeforeTheBody: a failed login whose upstream answers
// 401 before it has read the body (as a server refuses what it will not
// read, then closes the connection with the body unread) is counted by its
// 401, whatever the size of the body the client sends: 12 attempts with a
// body of 8 MiB each against a limit of 5 a minute get five 401s and seven
// 429s. (The edge engine stopped at the failed write of the body and
// answered 502, which counts nothing: passwords could be guessed without
// end by sending them with large bodies.)
func TestUpstreamAnswersBeforeTheBody(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		var served atomic.Int64
		rig := newLeaveRig(t, fr, func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, "wrong password")
		}, TransportOptions{})
		addr := strings.TrimPrefix(rig.base, "http://")
		body := bytes.Repeat([]byte("x"), 8<<20)
		var got []int
		for range 12 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				_, _ = fmt.Fprintf(c, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))
				_, _ = c.Write(body) // the gateway may stop reading it
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("attempt %d: no answer: %v", len(got)+1, err)
			}
			resp.Body.Close()
			got = append(got, resp.StatusCode)
			c.Close()
			<-sent
			rig.log.wait(t)
		}
		var n401, n429 int
		for _, s := range got {
			switch s {
			case http.StatusUnauthorized:
				n401++
			case http.StatusTooManyRequests:
				n429++
			}
		}
		if n401 != 5 || n429 != 7 || served.Load() != 5 {
			t.Fatalf("12 failed logins with large bodies answered early: %v (the upstream reached %d times); want five 401s, then 429s", got, served.Load())
		}
	})
}
