package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/waittest"
)

// TestRLSHotRestartOnTheSamePorts: on Redis, a second floodgate rls
// started on the ports of one still running listens beside it, and
// answers alone once the first has drained: the hot restart of
// envoyproxy/ratelimit, and the switch from it to floodgate rls on one
// host, where the new process starts before the old one stops.
//
// envoyproxy/ratelimit opens its gRPC, HTTP and debug listeners with
// SO_REUSEPORT. Observed on its build from source (github.com/envoyproxy/
// ratelimit at f2fb157), run on loopback on Redis: a second instance with
// the same GRPC_PORT, PORT and DEBUG_PORT started beside the first (`ss
// -ltnp` listed both processes on each of the three ports); after SIGTERM
// to the first (exit 0), the second answered ShouldRateLimit and
// /healthcheck (200). floodgate rls started beside a running
// envoyproxy/ratelimit on its ports exited with status 1 (`rls: listen
// gRPC (RLS v3): listen tcp 127.0.0.1:18081: bind: address already in
// use`), and so did a second floodgate rls beside the first.
//
// On the embedded store (BACKEND_TYPE=memory, which envoyproxy/ratelimit
// does not have) the ports stay its own: two processes would each count
// apart, doubling every limit, so the second refuses to start.
func TestRLSHotRestartOnTheSamePorts(t *testing.T) {
	srv := redistest.Start(t)
	redisEnv := map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr}

	old := startRLSProcess(t, redisEnv)
	if old.err != nil {
		t.Fatal(old.err)
	}
	if err := decideGRPCAt(old.addrs["gRPC"]); err != nil {
		t.Fatalf("the first process: %v", err)
	}
	same := map[string]string{}
	for k, v := range redisEnv {
		same[k] = v
	}
	for word, name := range map[string]string{"gRPC": "GRPC_PORT", "HTTP": "PORT", "debug": "DEBUG_PORT"} {
		_, port, err := net.SplitHostPort(old.addrs[word])
		if err != nil {
			t.Fatal(err)
		}
		same[name] = port
	}
	next := startRLSProcess(t, same)
	if next.err != nil {
		t.Fatalf("a second floodgate rls on the ports of one running: %v, want it to listen beside it", next.err)
	}
	if err := old.stop(); err != nil {
		t.Fatalf("the first process, stopping: %v", err)
	}
	// The first has drained and closed its listeners: every new
	// connection reaches the second.
	for i := range 5 {
		if err := decideGRPCAt(next.addrs["gRPC"]); err != nil {
			t.Fatalf("call %d after the first stopped: %v", i, err)
		}
		resp, err := http.Get("http://" + next.addrs["HTTP"] + "/healthcheck")
		if err != nil {
			t.Fatalf("/healthcheck %d after the first stopped: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthcheck %d after the first stopped: %d", i, resp.StatusCode)
		}
	}

	t.Run("memory_keeps_its_ports", func(t *testing.T) {
		mem := map[string]string{"BACKEND_TYPE": "memory"}
		first := startRLSProcess(t, mem)
		if first.err != nil {
			t.Fatal(first.err)
		}
		_, port, _ := net.SplitHostPort(first.addrs["gRPC"])
		second := startRLSProcess(t, map[string]string{"BACKEND_TYPE": "memory", "GRPC_PORT": port})
		if second.err == nil || !strings.Contains(second.err.Error(), "address already in use") {
			t.Errorf("a second floodgate rls on the embedded store, on the gRPC port of the first: %v, want address already in use", second.err)
		}
	})
}

// rlsProcess is a floodgate rls run by startRLSProcess.
type rlsProcess struct {
	addrs map[string]string // by the first word of their line: gRPC, HTTP, debug
	err   error             // why it did not start
	stop  func() error
}

// startRLSProcess runs floodgate rls on loopback (ports of the system's
// choosing unless set says otherwise) with one domain (shop: client, 1000 a
// minute) until it is stopped or the test ends, and waits until its three
// listeners are open or it has returned.
func startRLSProcess(t *testing.T, set map[string]string) *rlsProcess {
	t.Helper()
	env := shopEnv(t, map[string]string{"FLOODGATE_COMPAT": "true"}, set)
	lines := &lineWriter{c: make(chan string, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runRLS(ctx, env.Settings, func(string) string { return "" }, lines,
			slog.New(slog.NewTextHandler(io.Discard, nil)), rlsConns{})
	}()
	p := &rlsProcess{addrs: map[string]string{}}
	stopped := false
	p.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return waittest.Returns(t, "floodgate rls stopping", func() error { return <-done })
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil && p.err == nil {
			t.Errorf("floodgate rls: %v", err)
		}
	})
	for len(p.addrs) < 3 {
		select {
		case line := <-lines.c:
			what, on, ok := strings.Cut(strings.TrimPrefix(line, "floodgate rls: "), " on ")
			if ok {
				word, _, _ := strings.Cut(what, " ")
				p.addrs[word] = on
			}
		case err := <-done:
			stopped = true
			cancel()
			p.err = err
			if err == nil {
				p.err = errors.New("floodgate rls returned at start")
			}
			return p
		case <-time.After(waittest.Wait):
			t.Fatalf("floodgate rls did not start within %v", waittest.Wait)
		}
	}
	return p
}

// decideGRPCAt asks the service at addr for a decision on a connection of
// its own and wants OK.
func decideGRPCAt(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	return decideGRPC(rlsv3.NewRateLimitServiceClient(conn))
}
