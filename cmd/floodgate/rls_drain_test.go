package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRLSCommandDrainsOnSIGTERM runs floodgate rls as a process, holds a
// ShouldRateLimit call in flight (its stream open, its request not yet
// sent) and sends SIGTERM: /healthcheck answers 500 while the call is in
// flight, the call then gets its answer, and the process exits with
// status 0, as envoyproxy/ratelimit does and as a rollout expects.
func TestRLSCommandDrainsOnSIGTERM(t *testing.T) {
	p := startRLSDrainProcess(t)
	health := "http://" + p.addrs["HTTP"] + "/healthcheck"
	if code, body := httpGet(t, health); code != 200 {
		t.Fatalf("/healthcheck before SIGTERM: %d %q", code, body)
	}
	conn, req, ctx := p.serving(t)
	// The call in flight: the stream is open, its request held back.
	stream := p.hold(t, conn, ctx)
	time.Sleep(200 * time.Millisecond) // the stream's headers reach the server
	p.signalDraining(t, syscall.SIGTERM)
	select {
	case <-p.exited:
		t.Fatalf("floodgate rls exited (%v) with a call in flight\n%s", p.waitErr, p.stderr.String())
	case <-time.After(300 * time.Millisecond):
	}
	if code, _ := httpGet(t, health); code != http.StatusInternalServerError {
		t.Errorf("/healthcheck while draining: %d, want 500", code)
	}
	if resp := p.answer(t, stream, req, "the call in flight at SIGTERM"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("the call in flight: %v, want OK", resp.OverallCode)
	}
	p.exitsCleanly(t, "after SIGTERM")
	if !strings.Contains(p.stderr.String(), "draining") {
		t.Errorf("no log line says it drains:\n%s", p.stderr.String())
	}
}

// rlsDrainProcess is a floodgate rls process on the embedded store, started
// by startRLSDrainProcess, with the domain d (5 a minute for the key k).
type rlsDrainProcess struct {
	cmd     *exec.Cmd
	addrs   map[string]string // "gRPC", "HTTP", "debug": the addresses it named
	stderr  *lockedBuffer
	exited  chan struct{} // closed once the process has exited, with waitErr set
	waitErr error
}

// serving dials the process's gRPC port and makes one call, which it
// answers: the connection (closed at the test's end), the call's request,
// and a context of 30 s for the calls to come.
func (p *rlsDrainProcess) serving(t *testing.T) (*grpc.ClientConn, *rlsv3.RateLimitRequest, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(p.addrs["gRPC"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err != nil {
		t.Fatalf("a call before SIGTERM: %v", err)
	}
	return conn, req, ctx
}

// hold opens a ShouldRateLimit call on conn and holds its request back:
// a call in flight.
func (p *rlsDrainProcess) hold(t *testing.T, conn *grpc.ClientConn, ctx context.Context) grpc.ClientStream {
	t.Helper()
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// signalDraining sends the process sig and waits until its /healthcheck
// answers 500: it drains.
func (p *rlsDrainProcess) signalDraining(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	health := "http://" + p.addrs["HTTP"] + "/healthcheck"
	waitUntil(t, "/healthcheck to answer 500 while draining", 10*time.Second, func() bool {
		resp, err := http.Get(health)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusInternalServerError
	})
}

// answer sends a held call's request and returns its answer; what names
// the call in a failure.
func (p *rlsDrainProcess) answer(t *testing.T, stream grpc.ClientStream, req *rlsv3.RateLimitRequest, what string) *rlsv3.RateLimitResponse {
	t.Helper()
	if err := stream.SendMsg(req); err != nil {
		t.Fatalf("sending the request of %s: %v", what, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var resp rlsv3.RateLimitResponse
	if err := stream.RecvMsg(&resp); err != nil {
		t.Fatalf("%s got no answer: %v", what, err)
	}
	return &resp
}

// exitsCleanly waits for the process to exit with status 0 once its last
// call was answered; when names the signals in a failure.
func (p *rlsDrainProcess) exitsCleanly(t *testing.T, when string) {
	t.Helper()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Errorf("floodgate rls %s: %v, want exit status 0\n%s", when, p.waitErr, p.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("floodgate rls did not exit after its last call:\n%s", p.stderr.String())
	}
}

// startRLSDrainProcess runs floodgate rls as a process (this test binary,
// which runs main) and waits until it names its three listeners.
func startRLSDrainProcess(t *testing.T) *rlsDrainProcess {
	t.Helper()
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n"})
	cmd := exec.Command(bin, "rls")
	cmd.Env = []string{runMainEnv + "=1", "PATH=" + os.Getenv("PATH"), "BACKEND_TYPE=memory"}
	for k, v := range rlsEnvFor(dir, nil) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rlsDrainProcess{cmd: cmd, stderr: stderr, exited: make(chan struct{})}
	addrs := make(chan map[string]string, 1)
	go func() {
		re := regexp.MustCompile(`^floodgate rls: (\S+).* on (\S+)$`)
		m := map[string]string{}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if g := re.FindStringSubmatch(sc.Text()); g != nil {
				if m[g[1]] = g[2]; len(m) == 3 {
					addrs <- m
				}
			}
		}
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	select {
	case p.addrs = <-addrs:
	case <-p.exited:
		t.Fatalf("floodgate rls ended early: %v\n%s", p.waitErr, stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("floodgate rls did not start:\n%s", stderr.String())
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// TestRLSCommandOutlivesASecondSIGTERM sends floodgate rls SIGTERM, then
// SIGTERM again half a second into the drain (a runtime stopping the
// container again, a supervisor and a script that both signal it), with
// three ShouldRateLimit calls in flight: the second signal leaves the drain
// alone, as it does envoyproxy/ratelimit's, so the calls get their answers
// and the process exits with status 0 rather than being killed by the
// signal (status 143) with its calls cut. SIGINT twice (Ctrl-C twice at a
// terminal) still ends it at once.
func TestRLSCommandOutlivesASecondSIGTERM(t *testing.T) {
	p := startRLSDrainProcess(t)
	conn, req, ctx := p.serving(t)
	var streams []grpc.ClientStream // the calls in flight, their requests held back
	for range 3 {
		streams = append(streams, p.hold(t, conn, ctx))
	}
	time.Sleep(200 * time.Millisecond) // the streams' headers reach the server
	p.signalDraining(t, syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		t.Fatalf("floodgate rls ended (%v) on a second SIGTERM with 3 calls in flight\n%s", p.waitErr, p.stderr.String())
	case <-time.After(500 * time.Millisecond):
	}
	for i, stream := range streams {
		p.answer(t, stream, req, fmt.Sprintf("call %d in flight at the second SIGTERM", i))
	}
	p.exitsCleanly(t, "after two SIGTERMs")

	// SIGINT twice: the second one ends the process at once, its call cut.
	p = startRLSDrainProcess(t)
	conn2, err := grpc.NewClient(p.addrs["gRPC"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	p.hold(t, conn2, ctx)
	time.Sleep(200 * time.Millisecond)
	p.signalDraining(t, syscall.SIGINT)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if ee, ok := p.waitErr.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Errorf("floodgate rls after a second SIGINT: %v, want ended by the signal", p.waitErr)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("floodgate rls still runs 5 s after a second SIGINT with a call in flight:\n%s", p.stderr.String())
	}
}
