package app

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// writeFiles writes each file (a path under dir) with its text.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestContainerMemoryMax: the memory limit of the process's cgroup is
// read as each cgroup version and layout spells it: under v2 the least
// memory.max of the cgroup and those above it, under v1 the memory
// controller's limit, none for "max", v1's "no limit" or what cannot be
// read.
func TestContainerMemoryMax(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"v2 in a cgroup namespace", map[string]string{
			"self": "0::/\n", "fs/memory.max": "536870912\n"}, 512 * mib},
		{"v2, no limit", map[string]string{
			"self": "0::/\n", "fs/memory.max": "max\n"}, 0},
		{"v2, a parent's limit is lower", map[string]string{
			"self": "0::/system.slice/floodgate.service\n",
			"fs/system.slice/floodgate.service/memory.max": "max\n",
			"fs/system.slice/memory.max":                   "268435456\n"}, 256 * mib},
		{"v2, the process's own is lower", map[string]string{
			"self":                           "0::/kubepods/pod1/c1\n",
			"fs/kubepods/pod1/c1/memory.max": "104857600\n",
			"fs/kubepods/pod1/memory.max":    "209715200\n",
			"fs/kubepods/memory.max":         "max\n"}, 100 * mib},
		{"v1", map[string]string{
			"self": "12:pids:/docker/abc\n4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n",
			"fs/memory/docker/abc/memory.limit_in_bytes": "134217728\n"}, 128 * mib},
		{"v1, the host's path over the container's mount", map[string]string{
			"self": "4:memory:/docker/abc\n", "fs/memory/memory.limit_in_bytes": "134217728\n"}, 128 * mib},
		{"v1, no limit", map[string]string{
			"self": "4:memory:/\n", "fs/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"hybrid: v1's limit, v2 without memory", map[string]string{
			"self": "4:memory:/user.slice\n0::/user.slice\n",
			"fs/memory/user.slice/memory.limit_in_bytes": "67108864\n"}, 64 * mib},
		{"nothing readable", map[string]string{"self": "0::/\n"}, 0},
		{"garbage", map[string]string{"self": "x\n0::relative\n", "fs/memory.max": "lots\n"}, 0},
	} {
		dir := t.TempDir()
		writeFiles(t, dir, c.files)
		if got := containerMemoryMax(filepath.Join(dir, "fs"), filepath.Join(dir, "self")); got != c.want {
			t.Errorf("%s: containerMemoryMax = %d, want %d", c.name, got, c.want)
		}
	}
	if got := containerMemoryMax(t.TempDir(), filepath.Join(t.TempDir(), "missing")); got != 0 {
		t.Errorf("no /proc/self/cgroup: %d, want 0", got)
	}
}

// TestSoftLimitWithinTheContainer: the soft memory limit never goes past
// nine tenths of the container's memory limit, whatever the store's cap
// asks for, so that a process grown by its connections has the collector
// work to stay inside the container instead of being killed by the
// kernel. Before, the limit was the cap and its room alone (a 256 MiB
// store: 290 MiB or more, in a container of 64 MiB).
func TestSoftLimitWithinTheContainer(t *testing.T) {
	const mib = 1 << 20
	getenv := func(string) string { return "" }
	held := func() int64 { return 0 }
	stop := startMemLimit("auto", 256*mib, held, getenv, fixed(64*mib), slog.New(slog.DiscardHandler))
	got := debug.SetMemoryLimit(-1)
	stop()
	container := int64(64 * mib)
	if want := int64(float64(container) * ceilingShare); got != want {
		t.Errorf("a 256 MiB store in a 64 MiB container: soft limit %d, want %d (nine tenths of the container's)", got, want)
	}
	// A container with room leaves the limit as the store asks.
	stop = startMemLimit("auto", 16*mib, held, getenv, fixed(1<<40), slog.New(slog.DiscardHandler))
	got = debug.SetMemoryLimit(-1)
	stop()
	if lo := int64(16*mib + 16*mib/10 + SoftLimitFloor); got < lo || got > lo+256*mib {
		t.Errorf("a 16 MiB store in a 1 TiB container: soft limit %d, want about %d", got, lo)
	}
}

// ceilingOf is the ceiling of a container limit of v bytes.
func ceilingOf(v int64) int64 { return int64(float64(v) * ceilingShare) }

// fixed returns a reader of a container's memory limit that says v.
func fixed(v int64) func() int64 { return func() int64 { return v } }

// TestSoftLimitFollowsAResizedContainer: a pod whose memory limit is
// changed in place (Kubernetes' resize of a running pod) moves the soft
// limit's ceiling within containerEvery, both ways, and the log says so.
// Before, the limit read at start stayed until a restart: a pod shrunk
// from 1 GiB to 64 MiB kept a soft limit the kernel would kill it under.
func TestSoftLimitFollowsAResizedContainer(t *testing.T) {
	const mib = 1 << 20
	old := containerEvery
	containerEvery = 0 // read at every update, once a second
	defer func() { containerEvery = old }()
	var container atomic.Int64
	container.Store(1 << 30)
	var logs lockedBuffer
	stop := startMemLimit("auto", 256*mib, func() int64 { return 0 }, func(string) string { return "" },
		container.Load, slog.New(slog.NewTextHandler(&logs, nil)))
	defer stop()
	current := func() int64 { return debug.SetMemoryLimit(-1) }
	if got := current(); got >= ceilingOf(1<<30) || got < 256*mib {
		t.Fatalf("a 256 MiB store in a 1 GiB container: soft limit %d, want the store's own", got)
	}
	waitLimit := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for current() != want {
			if time.Now().After(deadline) {
				t.Fatalf("soft limit %d, want %d\n%s", current(), want, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	container.Store(64 * mib)
	waitLimit(ceilingOf(64 * mib))
	if !strings.Contains(logs.String(), "container_limit=67108864 was=1073741824") || !strings.Contains(logs.String(), "does not fit") {
		t.Errorf("the log does not say that the container shrank below the store:\n%s", logs.String())
	}
	container.Store(128 * mib)
	waitLimit(ceilingOf(128 * mib))
	container.Store(0) // the limit lifted
	deadline := time.Now().Add(10 * time.Second)
	for current() == ceilingOf(128*mib) {
		if time.Now().After(deadline) {
			t.Fatalf("the container's limit lifted: soft limit still %d\n%s", current(), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := current(); got < 256*mib {
		t.Errorf("the container's limit lifted: soft limit %d, want the store's own", got)
	}
}
