package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestChartMemoryLimitAsServeSeesIt renders the chart with memory limits
// on both sides of what policy.server.memory.max_bytes needs, and runs the
// real floodgate serve in a memory cgroup of each limit, as the container
// runtime runs the pod: the chart accepts a limit exactly when serve finds
// that its store fits under it (serve keeps its soft memory limit within
// nine tenths of the container's, and says so at start when the store's
// cap, a tenth of it and 8 MiB do not fit there).
func TestChartMemoryLimitAsServeSeesIt(t *testing.T) {
	bin := binary(t)
	for _, c := range []struct {
		limit    string
		maxBytes int
	}{
		{"512Mi", 268435456}, // the chart's defaults
		{"480Mi", 419430400}, // above the soft limit, under it once serve takes nine tenths
		{"500Mi", 419430400}, // nine tenths of it hold the soft limit
		{"300Mi", 268435456},
		{"512Mi", 536870912},
	} {
		t.Run(fmt.Sprintf("%s-%d", c.limit, c.maxBytes), func(t *testing.T) {
			_, _, err := renderErr(values(t, "mode: gateway\nresources: {limits: {memory: "+c.limit+"}}"+withMaxBytes(c.maxBytes)))
			accepted := err == nil
			if err != nil && !strings.Contains(err.Error(), "resources.limits.memory") {
				t.Fatalf("render: %v", err)
			}
			q := resource.MustParse(c.limit)
			fits := serveFitsIn(t, bin, q.Value(), c.maxBytes)
			switch {
			case accepted && !fits:
				t.Errorf("the chart accepts resources.limits.memory %s with max_bytes %d, and floodgate serve in a container of that limit says the store does not fit", c.limit, c.maxBytes)
			case !accepted && fits:
				t.Errorf("the chart refuses resources.limits.memory %s with max_bytes %d, which floodgate serve in a container of that limit takes: %v", c.limit, c.maxBytes, err)
			}
		})
	}
}

// serveFitsIn runs floodgate serve, its store capped at maxBytes, in a new
// memory cgroup limited to limit bytes, and reports whether it started
// without saying that the store does not fit the container's limit.
func serveFitsIn(t *testing.T, bin string, limit int64, maxBytes int) bool {
	t.Helper()
	cg := memoryCgroup(t, limit)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	writeFile(t, policy, fmt.Sprintf(`version: 1
server:
  memory: {max_bytes: %d}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
limits:
  - {name: per-ip, rate: 10, burst: 10, key: client_ip}
`, maxBytes))
	// The shell moves itself into the cgroup, then becomes serve.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1" && exec "$2" serve --config "$3" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --log-level info`,
		"sh", filepath.Join(cg, "cgroup.procs"), bin, policy)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var log []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("floodgate serve ended:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			if strings.Contains(l, "does not fit the container's memory limit") {
				return false
			}
			if strings.Contains(l, "msg=serving") {
				if !strings.Contains(strings.Join(log, "\n"), fmt.Sprintf("container_limit=%d", limit)) {
					t.Fatalf("floodgate serve did not see the cgroup's limit %d:\n%s", limit, strings.Join(log, "\n"))
				}
				return true
			}
		case <-timeout:
			t.Fatalf("floodgate serve did not start:\n%s", strings.Join(log, "\n"))
		}
	}
}

// memoryCgroup makes a memory cgroup limited to limit bytes (cgroup v1 or
// v2) and returns its directory, removed when the test ends. Without the
// right to make one, the test skips, or fails in CI (CI set), where the
// tests run as root.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	fail := func(err error) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("a memory cgroup cannot be made: %v", err)
		}
		t.Skipf("a memory cgroup cannot be made: %v", err)
	}
	name := fmt.Sprintf("floodgate-deploy-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	var dir, file string
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		dir, file = filepath.Join("/sys/fs/cgroup/memory", name), "memory.limit_in_bytes" // v1
	} else {
		dir, file = filepath.Join("/sys/fs/cgroup", name), "memory.max" // v2
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		fail(err)
	}
	t.Cleanup(func() {
		// The process has left it by then; removal may wait a moment
		// for the kernel to let go of the cgroup.
		for range 50 {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cgroup %s not removed", dir)
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		fail(err)
	}
	return dir
}
