package rls

import (
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"

	"github.com/floodgate/floodgate/internal/h2guard"
)

// notCalls are streams a client may open over and over on one connection
// that grpc-go ends itself, no call of the service ever made of them:
// each opens stream id. answered says the server answers each (with a
// HEADERS frame ending it or a RST_STREAM).
var notCalls = map[string]struct {
	answered bool
	open     func(h *h2Client, id uint32) error
}{
	// Unimplemented, from grpc-go's own handling of a method no service
	// has.
	"unknown method": {true, func(h *h2Client, id uint32) error {
		return h.headers(id, callFields("/x.Y/Z"), true)
	}},
	// 415, before any handler.
	"bad content-type": {true, func(h *h2Client, id uint32) error {
		f := callFields(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
		f[4][1] = "text/plain"
		return h.headers(id, f, true)
	}},
	// 405, before any handler.
	"GET": {true, func(h *h2Client, id uint32) error {
		f := callFields(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
		f[0][1] = "GET"
		return h.headers(id, f, true)
	}},
	// A RST_STREAM (FRAME_SIZE_ERROR) for headers past the server's
	// bound of 64 KiB: a field of 4,000 bytes 20 times, named by a byte
	// once HPACK's table holds it.
	"oversized headers": {true, func(h *h2Client, id uint32) error {
		f := callFields(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
		for range 20 {
			f = append(f, [2]string{"x-big", strings.Repeat("b", 4000)})
		}
		return h.headers(id, f, true)
	}},
	// A call of the service without its message: the handler's reading
	// of it fails.
	"no message": {true, func(h *h2Client, id uint32) error {
		return h.headers(id, callFields(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName), true)
	}},
	// A call opened and reset at once by the client.
	"reset at once": {false, func(h *h2Client, id uint32) error {
		if err := h.headers(id, callFields(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName), false); err != nil {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}},
}

// TestServerCutsStreamsThatAreNotCalls: a client that opens 20,000
// streams on one connection that never become calls of a service (an
// unknown method, a wrong content-type or :method, headers past the
// bound, a call without its message, a call reset at once), at most 64
// unanswered at a time, reading every answer, is sent a GOAWAY with
// ENHANCE_YOUR_CALM and closed once the connection's budget of frames
// that are not calls is spent: a stream earns the budget only once its
// call reaches a handler of the server's services. Before 2026-12-07 each
// stream earned it when opened, and 20,000 of each kind but the oversized
// headers (refused with a RST_STREAM, which costs) were taken, the
// connection kept.
func TestServerCutsStreamsThatAreNotCalls(t *testing.T) {
	srv, addr, cancel, _ := basicServer(t, ServerOptions{})
	defer cancel()
	const n = 20000
	for kind, nc := range notCalls {
		h := dialH2(t, addr)
		cpu := cpuTime()
		sent, answered, outstanding := 0, 0, 0
		ended := ""
	flood:
		for ; sent < n; sent++ {
			for nc.answered && outstanding >= 64 {
				select {
				case <-h.events:
					answered++
					outstanding--
				case err := <-h.gone:
					ended = "closed: " + err.Error()
					break flood
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: no answer in 10 s after %d streams", kind, sent)
				}
			}
			if err := nc.open(h, uint32(1+2*sent)); err != nil {
				ended = "write: " + err.Error()
				break
			}
			outstanding++
		}
		if ended == "" {
			// All were sent: a connection not closed 3 s later was kept.
			ended = "kept"
			deadline := time.After(3 * time.Second)
		wait:
			for {
				select {
				case <-h.events:
					answered++
				case err := <-h.gone:
					ended = "closed: " + err.Error()
					break wait
				case <-deadline:
					break wait
				}
			}
		}
		select {
		case away := <-h.away:
			ended = "GOAWAY " + away
		default:
		}
		t.Logf("%s: %d streams sent, %d answered, %s; CPU %v", kind, sent, answered, ended, cpuTime()-cpu)
		// The GOAWAY may be lost to the close's reset; the count of the
		// cuts below tells the budget cut the connection.
		if ended == "kept" || strings.HasPrefix(ended, "GOAWAY") && !strings.HasPrefix(ended, "GOAWAY ENHANCE_YOUR_CALM too many frames") {
			t.Errorf("%s: %d of %d streams that are not calls sent, %d answered; the connection: %s", kind, sent, n, answered, ended)
		}
		if answered > 2*h2guard.Burst {
			t.Errorf("%s: %d streams that are not calls answered before the cut, past a budget of %d", kind, answered, h2guard.Burst)
		}
	}
	cut := int64(0)
	for range 100 {
		cut = 0
		for _, c := range srv.ConnectionsCut() {
			cut += c
		}
		if cut == int64(len(notCalls)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cut != int64(len(notCalls)) {
		t.Errorf("connections cut %v, want %d in all", srv.ConnectionsCut(), len(notCalls))
	}
}

// cpuTime is the CPU time the process has used, the server's and its
// clients' alike: a number to report, never to assert.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestServerForgetsClosedConnections: the Conns a server finds by their
// client's address are forgotten once their connections close: 200
// connections, each making a call, leave none behind.
func TestServerForgetsClosedConnections(t *testing.T) {
	srv, addr, cancel, _ := basicServer(t, ServerOptions{})
	defer cancel()
	for range 200 {
		conn := dial(t, addr)
		ask(t, rlsv3.NewRateLimitServiceClient(conn), "d", desc("user", "a"))
		conn.Close()
	}
	left := -1
	for range 100 {
		runtime.GC()
		left = 0
		srv.conns.m.Range(func(any, any) bool { left++; return true })
		if left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left != 0 {
		t.Errorf("%d of 200 connections closed are still held", left)
	}
}
