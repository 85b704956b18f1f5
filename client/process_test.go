package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// The child side of TestWaitAcrossProcesses is selected by this variable,
// the address of the shared Redis; the parent sets it when it re-runs the
// test binary. A child prints "READY" once it can call Wait, and then reads
// the run's start and end (Unix ns) from its standard input.
const envChild = "FLOODGATE_WAIT_CHILD_REDIS"

const (
	waitLimit  = 5
	waitWindow = time.Second
)

// TestWaitAcrossProcesses runs several OS processes, each an application
// instance with its own engine and HTTP check API over one shared
// redis-server, each calling Wait in a loop for the same limit. Every
// window lets exactly the limit through in total.
func TestWaitAcrossProcesses(t *testing.T) {
	if addr := os.Getenv(envChild); addr != "" {
		waitChild(t, addr)
		return
	}
	rs := redistest.Start(t)
	windows := 3
	if testing.Short() {
		windows = 2
	}
	// A window is checked for exactness only when it saw a denial and no
	// decision straddled its end; on a very loaded machine a run may have
	// none, and then it runs again (each run checks safety throughout).
	for run := 1; run <= 3; run++ {
		if waitRun(t, rs.Addr, run, windows) > 0 {
			return
		}
	}
	t.Errorf("no window could be checked for exactness in 3 runs (no denials seen): the callers did not saturate the limit")
}

// waitRun is one run of TestWaitAcrossProcesses: it returns how many
// windows it could check for exactness.
func waitRun(t *testing.T, redisAddr string, run, windows int) (checked int) {
	t.Helper()
	const procs = 3
	var mu sync.Mutex
	admitted := map[int64]int{} // window end → admissions
	denied := map[int64]int{}   // window end → denials
	uncertain := map[int64]bool{}
	var wg sync.WaitGroup
	ready := make(chan struct{}, procs)
	exited := make(chan struct{}, procs)
	stdins := make([]io.WriteCloser, procs)
	cmds := make([]*exec.Cmd, procs)
	// abort ends the children started so far and fails the test.
	abort := func(msg string) {
		t.Helper()
		for i, cmd := range cmds {
			if cmd != nil {
				stdins[i].Close()
				cmd.Process.Kill()
			}
		}
		wg.Wait()
		t.Fatal(msg)
	}
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWaitAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"="+redisAddr)
		in, err := cmd.StdinPipe()
		if err != nil {
			abort(err.Error())
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			abort(err.Error())
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			abort(err.Error())
		}
		stdins[i] = in
		cmds[i] = cmd
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { exited <- struct{}{} }()
			sc := bufio.NewScanner(out)
			var log []string
			for sc.Scan() {
				line := sc.Text()
				log = append(log, line)
				if line == "READY" {
					ready <- struct{}{}
					continue
				}
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				n, _ := strconv.ParseInt(f[1], 10, 64)
				mu.Lock()
				switch f[0] {
				case "ADMIT":
					admitted[n]++
				case "DENY":
					denied[n]++
				case "AMBIG":
					hi, _ := strconv.ParseInt(f[2], 10, 64)
					for w := n; w <= hi; w += int64(waitWindow) {
						uncertain[w] = true
					}
				}
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("child %d: %v\n%s\n%s", i, err, strings.Join(log, "\n"), stderr.String())
			}
		}()
	}
	// Once every child can call Wait, start on the next window boundary at
	// least a little ahead, so that every child is waiting when the first
	// full window opens.
	deadline := time.After(time.Minute)
	for range procs {
		select {
		case <-ready:
		case <-exited:
			abort("a child ended before it was ready")
		case <-deadline:
			abort("the children were not ready within a minute")
		}
	}
	start := time.Now().Add(200 * time.Millisecond).Truncate(waitWindow).Add(waitWindow)
	end := start.Add(time.Duration(windows) * waitWindow)
	for i, in := range stdins {
		if _, err := fmt.Fprintln(in, start.UnixNano(), end.UnixNano()); err != nil {
			t.Errorf("child %d: start: %v", i, err)
		}
		in.Close()
	}
	wg.Wait()
	// Safety: no window ever lets more than the limit through. Exactness:
	// a window in which some caller was denied was full, so it let exactly
	// the limit through (with a cost of 1, a fixed window denies only at
	// its limit). Under a normal load every full window sees denials;
	// under a very heavy one, a window where no caller got to ask again is
	// only held to the safety bound.
	for w, n := range admitted {
		if n > waitLimit && !uncertain[w] {
			t.Errorf("window ending %s let %d through, more than %d", time.Unix(0, w).Format(time.RFC3339), n, waitLimit)
		}
	}
	for w := start; w.Before(end); w = w.Add(waitWindow) {
		e := w.Add(waitWindow).UnixNano()
		n := admitted[e]
		t.Logf("run %d, window %s: %d admitted, %d denied, uncertain %v", run, w.Format("15:04:05"), n, denied[e], uncertain[e])
		if uncertain[e] || denied[e] == 0 {
			continue
		}
		checked++
		if n != waitLimit {
			t.Errorf("window starting %s was full (denials) but let %d through, want exactly %d", w.Format(time.RFC3339), n, waitLimit)
		}
	}
	return checked
}

// waitChild is one application instance: its own engine over the shared
// Redis, its own HTTP check API on loopback, and a loop of Waits. Each
// admission is printed with the end of the window it fell in.
func waitChild(t *testing.T, addr string) {
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + addr, Prefix: "wait-test:"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rule := ruletest.With(t, floodgate.Limit{Name: "provider", Algorithm: floodgate.FixedWindow,
		Max: waitLimit, Window: waitWindow}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	eng := limiter.New(st, limiter.Options{Timeout: 5 * time.Second})
	ts := httptest.NewServer(httpapi.New(eng, httpapi.Rules(rule), httpapi.Options{}))
	defer ts.Close()
	c := client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 5 * time.Second})
	fmt.Println("READY")
	var startNS, endNS int64
	if _, err := fmt.Fscanln(os.Stdin, &startNS, &endNS); err != nil {
		t.Fatalf("reading the start: %v", err)
	}
	time.Sleep(time.Until(time.Unix(0, startNS)))
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, endNS))
	defer cancel()
	for {
		_, err := client.Wait(ctx, func(ctx context.Context) (client.Decision, error) {
			t0 := time.Now()
			d, err := c.Check(ctx, client.Hit{Limit: "provider", Key: "shared"})
			t1 := time.Now()
			if err == nil {
				report(d, t0, t1)
			}
			return d, err
		}, client.WaitOptions{})
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return // the run is over
			}
			t.Fatal(err)
		}
	}
}

// report prints which window a decision fell in. The decision was made at
// some instant between t0 and t1, ResetAfter (rounded up to a millisecond
// by the API) before its window's end, on this machine's clock (Redis
// runs here). The window is certain when exactly one window end lies in
// the possible range.
func report(d client.Decision, t0, t1 time.Time) {
	lo := t0.Add(d.ResetAfter - time.Millisecond)
	hi := t1.Add(d.ResetAfter)
	first := lo.Truncate(waitWindow)
	if first.Before(lo) {
		first = first.Add(waitWindow)
	}
	last := hi.Truncate(waitWindow)
	what := "DENY"
	if d.Allowed {
		what = "ADMIT"
	}
	if first.Equal(last) {
		fmt.Printf("%s %d\n", what, first.UnixNano())
		return
	}
	fmt.Printf("AMBIG %d %d\n", last.UnixNano(), first.UnixNano())
}
