package app

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/racecheck"
)

// heapLive is the bytes of heap live after a collection made now.
func heapLive() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// gcCycles is the number of collection cycles so far.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// residentKiB is this process's VmRSS, or -1 where /proc is not there.
func residentKiB(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return -1
}

// churn allocates n bytes of garbage in blocks of 4 KiB, as a server's
// requests do, and returns the collection cycles it took.
func churn(n int) uint64 {
	before := gcCycles()
	var keep []byte
	for range n / 4096 {
		keep = make([]byte, 4096)
		keep[0] = 1
	}
	runtime.KeepAlive(keep)
	return gcCycles() - before
}

// TestHeapReserve: the reserve counts as heap, makes the collector run
// several times less often over the same garbage, is shared by the
// services of one process, and goes with the last; none is held with
// GOMEMLIMIT set or at 0 MiB. (That it is not resident is
// TestHeapReserveNotResident's.)
func TestHeapReserve(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	none := func(string) string { return "" }
	runtime.GC()
	without := churn(96 << 20)

	heap0 := heapLive()
	release := holdHeapReserve(32, none, log)
	if grown := heapLive() - heap0; grown < 31<<20 {
		t.Fatalf("heap grew by %d bytes with a reserve of 32 MiB", grown)
	}
	runtime.GC()
	with := churn(96 << 20)
	t.Logf("96 MiB of garbage: %d collections without the reserve, %d with it", without, with)
	if with*3 > without {
		t.Errorf("%d collections with a reserve of 32 MiB against %d without: want a third or fewer", with, without)
	}

	second := holdHeapReserve(32, none, log)
	release()
	release() // a second call changes nothing
	runtime.GC()
	if reserve.block == nil {
		t.Fatal("the reserve went while a second service held it")
	}
	second()
	runtime.GC()
	if reserve.block != nil || reserve.owners != 0 {
		t.Fatalf("the reserve outlived its last holder: %d owners", reserve.owners)
	}
	if grown := heapLive() - heap0; grown > 16<<20 {
		t.Errorf("heap still %d bytes above where it was after the reserve went", grown)
	}

	holdHeapReserve(32, func(k string) string {
		if k == "GOMEMLIMIT" {
			return "512MiB"
		}
		return ""
	}, log)()
	holdHeapReserve(0, none, log)()
	if reserve.block != nil {
		t.Fatal("a reserve held with GOMEMLIMIT set or at 0 MiB")
	}
}

// reserveChildEnv marks the process TestHeapReserveNotResident starts.
const reserveChildEnv = "FLOODGATE_TEST_HEAP_RESERVE_CHILD"

// TestHeapReserveNotResident: the reserve takes address space, not memory.
// Holding it leaves the resident memory where it was, in a process of its
// own: a heap that has not churned, as floodgate rls's has when it takes
// the reserve at its start (in a heap with 32 MiB of freed pages the
// block would reuse them, and the runtime zeroes reused pages). The race
// detector's shadow memory moves the resident size, so scripts/test.sh
// runs this without -race.
func TestHeapReserveNotResident(t *testing.T) {
	if racecheck.Enabled {
		t.Skip("the race detector's shadow memory moves the resident size; scripts/test.sh runs this without -race")
	}
	if os.Getenv(reserveChildEnv) == "1" {
		rss0 := residentKiB(t)
		if rss0 < 0 {
			t.Skip("no /proc/self/status")
		}
		release := holdHeapReserve(32, func(string) string { return "" }, slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer release()
		if grown := residentKiB(t) - rss0; grown > 4<<10 {
			t.Fatalf("resident memory grew by %d KiB with a reserve of 32 MiB: its pages were touched", grown)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHeapReserveNotResident$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), reserveChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the reserve in a process of its own: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestHeapReserveNotResident") {
		t.Fatalf("the process of its own did not pass:\n%s", out)
	}
}
