package app

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/waittest"
)

// TestRLSConnCapsFromOpenFileLimit: the caps of floodgate rls's listeners
// leave at least three-eighths of the open files to the store whatever a
// flood holds, Envoy's calls get the largest share (half, a quarter
// beside the gateway), and a limit that is unknown still gives bounds.
func TestRLSConnCapsFromOpenFileLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit  uint64
		beside bool
		want   rlsConns
	}{
		{1024, false, rlsConns{grpc: 512, http: 64, side: 32}},
		{65536, false, rlsConns{grpc: 32768, http: 4096, side: 1024}},
		{65536, true, rlsConns{grpc: 16384, http: 4096, side: 1024}},
		{0, false, rlsConns{grpc: 1 << 19, http: 1 << 16, side: 1024}},       // unknown
		{1 << 40, false, rlsConns{grpc: 1 << 19, http: 1 << 16, side: 1024}}, // unlimited
		{64, false, rlsConns{grpc: 64, http: 64, side: 16}},                  // floors
	} {
		files := countedFiles(tc.limit)
		got := rlsConnsFor(files, tc.beside)
		if got != tc.want {
			t.Errorf("limit %d, beside %v: caps %+v, want %+v", tc.limit, tc.beside, got, tc.want)
		}
		if held := got.grpc + got.http + 2*got.side; files >= 1024 && held > files*5/8 {
			t.Errorf("limit %d: a flood of every listener holds %d of %d files; want at most five-eighths", tc.limit, held, files)
		}
	}
	if got := (rlsConns{grpc: 4}).or(rlsConns{grpc: 9, http: 8, side: 7}); got != (rlsConns{grpc: 4, http: 8, side: 7}) {
		t.Errorf("or: %+v", got)
	}
}

// TestRLSGRPCConnectionFlood: with its gRPC listener capped at four
// connections, floodgate rls closes a connection past the cap at once,
// unread and unanswered (a new gRPC client gets Unavailable), while a
// caller connected before the flood still gets decisions; connections
// the flood closes give their places back.
func TestRLSGRPCConnectionFlood(t *testing.T) {
	const grpcCap = 4
	addrs := startCappedRLS(t, rlsConns{grpc: grpcCap})
	addr := addrs["gRPC"]

	caller, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	rl := rlsv3.NewRateLimitServiceClient(caller)
	if err := decideGRPC(rl); err != nil {
		t.Fatalf("before the flood: %v", err)
	}

	// The caller holds one place; the flood takes the three others.
	var flood []net.Conn
	defer func() { closeAll(flood) }()
	for i := range grpcCap - 1 {
		c := dialTCP(t, addr)
		flood = append(flood, c)
		if !isSettings(greeting(t, c)) {
			t.Fatalf("flood connection %d of %d, within the cap, was closed", i+1, grpcCap-1)
		}
	}
	// (a) Past the cap: closed at once, without a byte.
	past := dialTCP(t, addr)
	if g := greeting(t, past); len(g) != 0 {
		past.Close()
		t.Fatalf("a connection past the cap of %d got %q; want it closed at once without a byte", grpcCap, g)
	}
	past.Close()
	if err := freshGRPCDecision(addr); status.Code(err) != codes.Unavailable {
		t.Errorf("a new gRPC client during the flood: %v; want Unavailable", err)
	}
	// (b) The caller connected before the flood still gets decisions.
	for range 3 {
		if err := decideGRPC(rl); err != nil {
			t.Fatalf("the caller during the flood: %v", err)
		}
	}
	// (c) The flood leaves: its places come back, as many as it held, and
	// no more.
	closeAll(flood)
	flood = nil
	eventually(t, "the flood's places back", func() bool {
		c := dialTCP(t, addr)
		if !isSettings(greeting(t, c)) {
			c.Close() // a place not given back yet
			return false
		}
		flood = append(flood, c)
		return len(flood) == grpcCap-1
	})
	past = dialTCP(t, addr)
	if g := greeting(t, past); len(g) != 0 {
		t.Errorf("a connection past the cap after the places came back got %q; want it closed", g)
	}
	past.Close()
	closeAll(flood)
	flood = nil
	var fresh error
	eventually(t, "a new gRPC client served", func() bool {
		fresh = freshGRPCDecision(addr)
		return status.Code(fresh) != codes.Unavailable
	})
	if fresh != nil {
		t.Errorf("a new gRPC client after the flood: %v", fresh)
	}
}

// TestRLSHTTPConnectionFlood: with its HTTP listener (/json,
// /healthcheck) capped at three connections and its debug listener at
// two, floodgate rls answers a connection past a cap 503 at once, while
// a /json caller connected before the flood still gets decisions;
// connections the flood closes give their places back.
func TestRLSHTTPConnectionFlood(t *testing.T) {
	const httpCap, debugCap = 3, 2
	addrs := startCappedRLS(t, rlsConns{http: httpCap, side: debugCap})
	addr := addrs["HTTP"]

	caller := &httpConn{Conn: dialTCP(t, addr)}
	defer caller.Close()
	caller.br = bufio.NewReader(caller)
	const decision = `{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`
	if code, body := caller.roundTrip(t, "POST", "/json", decision); code != 200 || !strings.Contains(body, `"OK"`) {
		t.Fatalf("/json before the flood: %d %s", code, body)
	}

	var flood []net.Conn
	defer func() { closeAll(flood) }()
	// hold opens connections to addr, each with a request answered and
	// kept alive, until the flood holds n.
	hold := func(addr, path string, n int) {
		eventually(t, "places for the flood", func() bool {
			c := &httpConn{Conn: dialTCP(t, addr)}
			c.br = bufio.NewReader(c)
			if code, _ := c.roundTrip(t, "GET", path, ""); code != 200 {
				c.Close() // a place not given back yet
				return false
			}
			flood = append(flood, c)
			return len(flood) == n
		})
	}
	// The caller holds one place; the flood takes the two others.
	hold(addr, "/healthcheck", httpCap-1)
	// (a) Past the cap: answered 503 at once, before any request.
	if code := overCap(t, addr); code != http.StatusServiceUnavailable {
		t.Fatalf("a connection past the cap of %d: %d; want 503 at once", httpCap, code)
	}
	// (b) The caller connected before the flood still gets decisions.
	for range 3 {
		if code, body := caller.roundTrip(t, "POST", "/json", decision); code != 200 || !strings.Contains(body, `"OK"`) {
			t.Fatalf("/json during the flood: %d %s", code, body)
		}
	}
	// (c) The flood leaves: its places come back, as many as it held.
	closeAll(flood)
	flood = nil
	hold(addr, "/healthcheck", httpCap-1)
	if code := overCap(t, addr); code != http.StatusServiceUnavailable {
		t.Errorf("a connection past the cap after the places came back: %d; want 503", code)
	}
	closeAll(flood)
	flood = nil

	// The debug listener has a cap of its own, with the same answer.
	hold(addrs["debug"], "/rlconfig", debugCap)
	if code := overCap(t, addrs["debug"]); code != http.StatusServiceUnavailable {
		t.Errorf("a connection past the debug listener's cap of %d: %d; want 503", debugCap, code)
	}
	if code, body := caller.roundTrip(t, "POST", "/json", decision); code != 200 {
		t.Errorf("/json while the debug listener is full: %d %s", code, body)
	}
}

// startCappedRLS runs floodgate rls on loopback with the embedded store,
// one domain (shop: client, 1000 a minute) and the caps of conns, until
// the test ends, and returns the addresses of its listeners by the first
// word of their line ("gRPC", "HTTP", "debug").
func startCappedRLS(t *testing.T, conns rlsConns) map[string]string {
	t.Helper()
	dir := t.TempDir()
	cd := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(cd, 0o755); err != nil {
		t.Fatal(err)
	}
	shop := "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"
	if err := os.WriteFile(filepath.Join(cd, "shop.yaml"), []byte(shop), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := ReadEnvoy(envOf(map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"RUNTIME_ROOT": dir, "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false", "BACKEND_TYPE": "memory",
		"FLOODGATE_HEAP_RESERVE_MIB": "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	lines := &lineWriter{c: make(chan string, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runRLS(ctx, env.Settings, func(string) string { return "" }, lines, slog.New(slog.NewTextHandler(io.Discard, nil)), conns)
	}()
	t.Cleanup(func() {
		cancel()
		if err := waittest.Returns(t, "floodgate rls stopping", func() error { return <-done }); err != nil {
			t.Errorf("floodgate rls: %v", err)
		}
	})
	addrs := map[string]string{}
	for len(addrs) < 3 {
		var line string
		select {
		case line = <-lines.c:
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("floodgate rls did not start: %v", err)
		case <-time.After(waittest.Wait):
			t.Fatalf("floodgate rls did not start within %v", waittest.Wait)
		}
		// "floodgate rls: gRPC (RLS v3) on 127.0.0.1:PORT"
		what, on, ok := strings.Cut(strings.TrimPrefix(line, "floodgate rls: "), " on ")
		if !ok {
			t.Fatalf("floodgate rls did not start: %q", line)
		}
		word, _, _ := strings.Cut(what, " ")
		addrs[word] = on
	}
	return addrs
}

// eventually calls f until it returns true, failing the test when it has
// not after waittest.Wait: f tries what a moment later may work (a place
// the server has not given back yet).
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waittest.Wait); !f(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waittest.Wait)
		}
		time.Sleep(5 * time.Millisecond) // no spinning on a loaded machine
	}
}

// lineWriter sends each line written to it to c.
type lineWriter struct {
	c    chan string
	part string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.part += string(p)
	for {
		line, rest, ok := strings.Cut(w.part, "\n")
		if !ok {
			return len(p), nil
		}
		w.c <- line
		w.part = rest
	}
}

// decideGRPC asks for a decision on rl and wants OK.
func decideGRPC(rl rlsv3.RateLimitServiceClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client", Value: "a"}}}}})
	if err != nil {
		return err
	}
	if r.OverallCode != rlsv3.RateLimitResponse_OK {
		return errors.New("answer " + r.OverallCode.String())
	}
	return nil
}

// freshGRPCDecision asks for a decision over a new client's connection.
func freshGRPCDecision(addr string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	return decideGRPC(rlsv3.NewRateLimitServiceClient(cc))
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// greeting returns the first nine bytes the server on c sends, or those
// it sends before it closes c: gRPC's server writes its HTTP/2 preface, a
// SETTINGS frame, before it reads anything.
func greeting(t *testing.T, c net.Conn) []byte {
	t.Helper()
	return waittest.Returns(t, "reading a gRPC connection", func() []byte {
		head := make([]byte, 9) // an HTTP/2 frame's header
		n, _ := io.ReadFull(c, head)
		return head[:n]
	})
}

// isSettings reports whether b is the header of an HTTP/2 SETTINGS frame.
func isSettings(b []byte) bool { return len(b) == 9 && b[3] == 0x4 }

// overCap opens a connection to addr and returns the status of the answer
// it gets before it sends anything (0 when it gets none).
func overCap(t *testing.T, addr string) int {
	t.Helper()
	c := dialTCP(t, addr)
	defer c.Close()
	return waittest.Returns(t, "reading a connection past the cap", func() int {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		if resp.Header.Get("Retry-After") == "" {
			return -resp.StatusCode
		}
		return resp.StatusCode
	})
}

// httpConn is an HTTP/1.1 connection kept alive across requests.
type httpConn struct {
	net.Conn
	br *bufio.Reader
}

// roundTrip sends one request and returns the answer's status and body
// (0 when the connection fails).
func (c *httpConn) roundTrip(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Write(c); err != nil {
		return 0, err.Error()
	}
	type answer struct {
		code int
		body string
	}
	a := waittest.Returns(t, method+" "+path, func() answer {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return answer{0, err.Error()}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return answer{0, err.Error()}
		}
		return answer{resp.StatusCode, string(b)}
	})
	return a.code, a.body
}
