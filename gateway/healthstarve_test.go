package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// healthChild is the environment variable that makes this test binary an
// upstream of its own process (serveHealthChild, from TestMain): one that
// answers at once whatever this process does.
const healthChild = "FLOODGATE_TEST_HEALTH_CHILD"

// serveHealthChild answers 200 to every request on a loopback port it
// prints as a URL, until its standard input closes (its parent ended).
func serveHealthChild() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
	os.Exit(1)
}

// upstreamProcess starts this test binary as an upstream in a process of
// its own (serveHealthChild) and returns its URL.
func upstreamProcess(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), healthChild+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("upstream process: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestHealthCheckOfAStarvedProcess: an upstream that answers every check
// at once, in a process of its own, is never taken out by the active
// checks of a gateway whose goroutines wait their turn for the CPU (busy
// goroutines of this process, 16 to a CPU): a check whose answer reached
// its connection, or whose request this process had not written yet, when
// its timeout came is no missed check. A target that takes its checks and
// never answers (a listener whose connections are never accepted by its
// program), over HTTP or HTTPS (its TLS handshake never answered), is
// still taken out at its timeout.
func TestHealthCheckOfAStarvedProcess(t *testing.T) {
	up := upstreamProcess(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	src := fmt.Sprintf(`
routes:
  - name: r
    match: {paths: ["/r"]}
    upstreams: ["%s", "http://%s", "https://%[2]s"]
    health: {path: /healthz, interval: 300ms, timeout: 100ms, unhealthy: 2, healthy: 1}
limits:
  - {name: wide, rate: 100000000, burst: 1000000000000, key: global}
`, up, silent.Addr())
	g, _ := poolOf(t, src, "r", nil)
	state := func() (answering, silentIn bool) {
		for _, ts := range g.Targets() {
			if ts.Target == up {
				answering = ts.Healthy
			} else {
				silentIn = silentIn || ts.Healthy
			}
		}
		return answering, silentIn
	}
	time.Sleep(time.Second) // checks made at ease
	if answering, silentIn := state(); !answering || silentIn {
		t.Fatalf("before the CPU is busy: the answering target in: %v, a silent one in: %v; want true, false", answering, silentIn)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	hogs := 16 * runtime.GOMAXPROCS(0)
	for range hogs {
		go func() {
			defer func() { done <- struct{}{} }()
			for !stop.Load() {
			}
		}()
	}
	looks, out := 0, 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); { // some six checks
		time.Sleep(20 * time.Millisecond)
		looks++
		if answering, _ := state(); !answering {
			out++
		}
	}
	stop.Store(true)
	for range hogs {
		<-done
	}
	if out > 0 {
		t.Errorf("the target answering every check at once was out at %d of %d looks while this process was short of CPU", out, looks)
	}
	if _, silentIn := state(); silentIn {
		t.Error("a silent target is in")
	}
}
