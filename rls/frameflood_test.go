package rls

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestServerCutsFrameFloods: a gRPC client that sends 100,000 HTTP/2
// frames that are not calls of one kind on its connection, reading what
// the server answers, is sent a GOAWAY with ENHANCE_YOUR_CALM (unless the
// close's reset overtakes it) and closed once its budget is spent
// (internal/h2guard). grpc-go alone cut PINGs (too_many_pings) but
// answered all 100,000 SETTINGS and took every WINDOW_UPDATE, PRIORITY
// and unknown frame, the connection kept. Each cut is counted
// (Server.ConnectionsCut) under the kind of frame that spent most of the
// budget and logged as a warning naming the client; before, a cut left no
// trace.
func TestServerCutsFrameFloods(t *testing.T) {
	var log syncBuffer
	srv, addr, cancel, _ := basicServer(t, ServerOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer cancel()
	floods := map[string]func(fr *http2.Framer, i int) error{
		"SETTINGS":      func(fr *http2.Framer, i int) error { return fr.WriteSettings() },
		"WINDOW_UPDATE": func(fr *http2.Framer, i int) error { return fr.WriteWindowUpdate(0, 1) },
		"PRIORITY": func(fr *http2.Framer, i int) error {
			return fr.WritePriority(uint32(1001+2*i), http2.PriorityParam{Weight: 1})
		},
		"unknown type": func(fr *http2.Framer, i int) error { return fr.WriteRawFrame(0x77, 0, 0, []byte("x")) },
		// Calls past the 256 a connection may have at once, each refused
		// with a RST_STREAM: no handler runs.
		"refused HEADERS": func(fr *http2.Framer, i int) error {
			if i == 0 {
				for id := uint32(1); id < 1+2*DefaultMaxConcurrentStreams; id += 2 {
					if err := writeCall(fr, id, false); err != nil {
						return err
					}
				}
			}
			return writeCall(fr, uint32(1+2*DefaultMaxConcurrentStreams+2*i), true)
		},
	}
	for kind, send := range floods {
		c, fr := rawH2(t, addr, 0)
		end := make(chan string, 1)
		go func() {
			rd := http2.NewFramer(nil, c)
			for {
				f, err := rd.ReadFrame()
				if err != nil {
					end <- "closed without a GOAWAY: " + err.Error()
					return
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					end <- g.ErrCode.String()
					_, _ = io.Copy(io.Discard, c)
					return
				}
			}
		}()
		const n = 100000
		sent := 0
		for ; sent < n; sent++ {
			if send(fr, sent) != nil {
				break
			}
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		// The GOAWAY may be lost: the server closes with the client's
		// frames unread, which resets the connection, however many the
		// client had still to send (none, when the sockets' buffers took
		// them all before the cut). Whether the guard cut it, not grpc-go,
		// the counts below tell: one cut of each kind.
		if got := <-end; got != "ENHANCE_YOUR_CALM" && !strings.Contains(got, "reset") && !strings.Contains(got, "EOF") {
			t.Errorf("%s: %d of %d sent; the connection ended with %s", kind, sent, n, got)
		}
	}
	// The count follows the GOAWAY, which the client may read first.
	want := map[string]int64{"settings": 1, "window_update": 1, "priority": 1, "unknown": 1, "refused_stream": 1}
	cut := srv.ConnectionsCut()
	for i := 0; i < 100 && fmt.Sprint(cut) != fmt.Sprint(withZeros(cut, want)); i++ {
		time.Sleep(100 * time.Millisecond)
		cut = srv.ConnectionsCut()
	}
	if fmt.Sprint(cut) != fmt.Sprint(withZeros(cut, want)) {
		t.Errorf("connections cut %v, want %v", cut, want)
	}
	if l := log.String(); !strings.Contains(l, "level=WARN msg=\"h2guard: HTTP/2 connection cut") || !strings.Contains(l, "client=127.0.0.1:") {
		t.Errorf("the cuts are not logged with their clients:\n%s", l)
	}
}

// withZeros returns want with a zero for each key of all it lacks.
func withZeros(all, want map[string]int64) map[string]int64 {
	m := make(map[string]int64, len(all))
	for k := range all {
		m[k] = want[k]
	}
	return m
}

// TestServerKeepsBusyClients: a client making 3,000 calls on its one
// connection, 200 of them at once, with gRPC's own window updates and
// pings, after 2,000 calls the service refuses (InvalidArgument, answered
// without a message, whose DATA frames would earn the budget), is never
// cut by the budget of frames that are not calls: it dials once. Each of
// its calls reached the service's handler. So too with an interceptor of
// the server's own among ExtraOptions (floodgate rls counts its calls
// with one), which runs before the one that tells each call reached a
// handler.
func TestServerKeepsBusyClients(t *testing.T) {
	outer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	for _, so := range []ServerOptions{{}, {ExtraOptions: []grpc.ServerOption{grpc.UnaryInterceptor(outer)}}} {
		keepsBusyClient(t, so)
	}
}

// keepsBusyClient makes the calls of TestServerKeepsBusyClients to a
// server of so.
func keepsBusyClient(t *testing.T, so ServerOptions) {
	_, addr, cancel, _ := basicServer(t, so)
	defer cancel()
	var dials atomic.Int32
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	// Calls the service refuses, answered without a message.
	for range 2000 {
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "a")}})
		stop()
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a call without a domain: %v, want InvalidArgument", err)
		}
	}
	for i := range 2800 {
		ask(t, c, "d", desc("user", fmt.Sprint(i)))
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() { ask(t, c, "d", desc("user", fmt.Sprint("at once ", i))) })
	}
	wg.Wait()
	if n := dials.Load(); n != 1 {
		t.Fatalf("the client dialed %d times: its connection was cut", n)
	}
}

// writeCall opens stream id with the headers of a call of ShouldRateLimit,
// its message to come unless end.
func writeCall(fr *http2.Framer, id uint32, end bool) error {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "rls"},
		{":path", rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b.Bytes(), EndHeaders: true, EndStream: end})
}
