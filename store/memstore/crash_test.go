package memstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// crashEnv marks the child process of TestCrashLoss; its value is the
// state file's path.
const crashEnv = "FLOODGATE_MEMSTORE_CRASH_CHILD"

// crashCharged is the number of hits the child charges before it reports
// that a snapshot has covered them.
const crashCharged = 500

// TestCrashLoss runs a store with a state file in a child process, charges
// a known number of hits, kills the child with SIGKILL after snapshots have
// been written, reopens the file and checks that the restored count lies
// within the documented bound: everything charged before the last
// completed snapshot began survives, nothing that was never charged
// appears.
func TestCrashLoss(t *testing.T) {
	t.Parallel()
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(t, path)
		return
	}
	path := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashLoss$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	ready, last, after := false, int64(0), 0
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "ready":
			ready = true
		case "charged":
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("child said %q", lines.Text())
			}
			last = n
			after++
		}
		if ready && after >= 100 {
			break
		}
		if !ready {
			after = 0 // count the charges after "ready"
		}
	}
	if !ready || after < 100 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child ended early (ready %v, %d charges after it): %v", ready, after, lines.Err())
	}
	// SIGKILL: no deferred function, no Close, no last snapshot.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() { // what the child printed before it died
		if f := strings.Fields(lines.Text()); len(f) == 2 && f[0] == "charged" {
			last, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	cmd.Wait()

	s := newStore(t, memstore.Options{StatePath: path, SnapshotInterval: -1, SweepInterval: -1})
	if st := s.Stats(); st.LoadError != nil || st.Loaded != 1 {
		t.Fatalf("after kill -9: %+v, want the one key loaded", st)
	}
	got := used(t, s, windowRule(t, 1_000_000), "crash")
	// The child had printed "charged n" after charging n; it may have
	// charged one more before it died.
	if got < crashCharged || got > last+1 {
		t.Fatalf("restored count %d, want between %d (covered by a snapshot) and %d (all charged)", got, crashCharged, last+1)
	}
	t.Logf("charged %d..%d before the kill, restored %d (lost %d)", last, last+1, got, last-got)
}

// crashChild charges crashCharged hits, then goes on charging one hit a
// millisecond until killed (or for 30 s at most), printing each. It says
// "ready" once a snapshot that began after the first crashCharged hits has
// completed.
func crashChild(t *testing.T, path string) {
	s, err := memstore.New(memstore.Options{StatePath: path, SnapshotInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := windowRule(t, 1_000_000)
	h := limiter.Hit{Rule: r, Key: "crash", Cost: 1}
	for range crashCharged {
		charge(t, s, h)
	}
	covered := time.Now()
	ready := false
	// Bounded, in case the parent is gone: it kills the child long before.
	for n, end := crashCharged+1, time.Now().Add(30*time.Second); time.Now().Before(end); n++ {
		if !ready && s.Stats().LastSnapshot.After(covered) {
			fmt.Println("ready", crashCharged)
			ready = true
		}
		charge(t, s, h)
		fmt.Println("charged", n)
		time.Sleep(time.Millisecond)
	}
}
