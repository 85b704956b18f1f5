package alarm

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
)

// TestHugeResponseHeaderRefused: a receiver that answers with a header
// far over maxResponseHeader (4 MiB of it) fails the delivery once the
// bound is read, rather than have the delivery read and hold megabytes:
// net/http's default bound, 10 MiB, let each delivery under way hold that
// much, and a receiver was counted as having taken the alarm.
func TestHugeResponseHeaderRefused(t *testing.T) {
	t.Parallel()
	addr, _ := rawReceiver(t, func(c net.Conn) {
		head := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
		pad := "X-Pad: " + strings.Repeat("p", 4<<10) + "\r\n"
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		for range 1024 { // 4 MiB of header lines
			if _, err := io.WriteString(c, pad); err != nil {
				return // the client stopped reading
			}
		}
		_, _ = io.WriteString(c, "\r\n")
	})
	if d, f := deliverOnce(t, addr); d != 0 || f != 1 {
		t.Errorf("an answer with 4 MiB of header: %v delivered, %v failed; want the attempt failed past the 64 KiB bound", d, f)
	}
}

// TestEndlessResponseBodyNotRead: a receiver that answers 200 and then
// sends a body without end (a gigabyte, a chunk at a time) has taken the
// alarm, and the delivery reads at most maxResponseBody of the body before
// it closes the connection: the receiver can write no more than the
// sockets' buffers hold past that, far from the gigabyte a delivery that
// read the body whole would take from it.
func TestEndlessResponseBodyNotRead(t *testing.T) {
	t.Parallel()
	var written atomic.Int64
	addr, stop := rawReceiver(t, func(c net.Conn) {
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		chunk := "10000\r\n" + strings.Repeat("b", 64<<10) + "\r\n"
		for range 16 << 10 { // 1 GiB
			n, err := io.WriteString(c, chunk)
			written.Add(int64(n))
			if err != nil {
				return // the delivery closed the connection
			}
		}
	})
	if d, _ := deliverOnce(t, addr); d != 1 {
		t.Errorf("an answer of 200 with an endless body: %v delivered, want 1", d)
	}
	stop()
	if n := written.Load(); n > 64<<20 {
		t.Errorf("the receiver wrote %d MiB of body before the delivery let go of it, want far under the gigabyte it had", n>>20)
	}
}

// rawReceiver serves webhook deliveries on a loopback listener: it reads
// each request whole, then lets answer write the answer on the raw
// connection. stop closes the listener and waits for every connection's
// answer to end; it runs when the test ends too.
func rawReceiver(t *testing.T, answer func(c net.Conn)) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a bound for failing only
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				answer(c)
			})
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { ln.Close(); wg.Wait() }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// deliverOnce has an alarm of one plan, whose webhook is the receiver at
// addr, deliver one alarm, in one attempt, and returns the deliveries
// counted delivered and failed once it has ended.
func deliverOnce(t *testing.T, addr string) (delivered, failed float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	a, err := New(Options{Dedup: NewLocalDedup(), Registerer: reg, Backoff: time.Millisecond, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := testPolicy(t)
	a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: "http://" + addr + "/hook", Secret: []byte("s")}})
	runAlarms(t, a)
	use(a, p, "key:k", 10)
	result := func(r string) float64 {
		return promtest.Value(t, reg, "floodgate_alarm_webhooks_total", promtest.Labels{"result": r})
	}
	waitFor(t, "the webhook's outcome", func() bool { return result("delivered")+result("failed") == 1 })
	return result("delivered"), result("failed")
}
