package simulate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writeTrace writes n arrivals of an arrivals file, ten milliseconds
// apart with costs 1 to 3, plus extra at its end, and returns its path.
func writeTrace(t testing.TB, n int, extra string) string {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("# a steady trace\n\n")
	for i := range n {
		fmt.Fprintf(&b, "%d.%03d %d\n", i/100, (i%100)*10, 1+i%3)
	}
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "trace.txt")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReportsUnchangedByStreaming holds the reports of runs over every
// algorithm, short and long, table and JSON, and of runs that fail, to
// the bytes they had when the simulation held every decision until the
// end (their SHA-256 and length).
func TestReportsUnchangedByStreaming(t *testing.T) {
	t.Parallel()
	trace := writeTrace(t, 100_000, "")
	bad := writeTrace(t, 50_000, "499 1\n10 1\n")
	never := writeTrace(t, 1000, "10.5 500\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--algorithm", "token_bucket", "--rate", "150", "--burst", "50", "--arrivals-file", trace}, "fce9982a4eee0ea98c152d2616177322d085a5c1159859485df3bf20c95c98f2 5300112 <nil>"},
		{[]string{"--algorithm", "token_bucket", "--rate", "150", "--burst", "50", "--arrivals-file", trace, "--json"}, "e3541713aab075b5b4a10496d706503ea5c4c46c947f1c53da9fe9d074653641 10610400 <nil>"},
		{[]string{"--algorithm", "gcra", "--rate", "100", "--burst", "20", "--arrivals-file", never, "--json"}, "328d1c9a3536e1d73c4f93cdff9a623ed27dc1d70b452e718f59d8b716941bec 100038 <nil>"},
		{[]string{"--algorithm", "leaky_bucket", "--rate", "120", "--burst", "30", "--arrivals-file", trace}, "fdf69385b63a184d9017e84b0f687f2800a3ef53dd8c065dcb4215c80c4ea03c 5300112 <nil>"},
		{[]string{"--algorithm", "leaky_queue", "--rate", "150", "--burst", "40", "--delay", "10", "--arrivals-file", trace, "--json"}, "cd3fa66d5f47c5f2c29cd990b458644c99aa130e8db38008efe1c9f4e41dac59 12643645 <nil>"},
		{[]string{"--algorithm", "leaky_queue", "--rate", "150", "--burst", "40", "--arrivals-file", never}, "0df742282140ea5fd783c0d050a0e2a3c5990fe2ad8d2638c03201322fe33d05 65229 <nil>"},
		{[]string{"--algorithm", "leaky_queue", "--rate", "2", "--burst", "2", "--json", "--arrivals", "0*3:1,0.25:4"}, "3c38ca5838ac21d738ce9a570be21ea189510917d34c75e3aa8c3a4b26703aec 498 <nil>"},
		{[]string{"--algorithm", "fixed_window", "--limit", "180", "--window", "1s", "--arrivals-file", trace}, "9cac51df3c9aca6194dd83180b6b7548827385f46a4f0754e2237fe262ae2875 5300102 <nil>"},
		{[]string{"--algorithm", "sliding_log", "--limit", "180", "--window", "1s", "--arrivals-file", trace, "--json"}, "a0a9aa0b1d93dcbb3b5d67fdc01de17465fe9e59f27a06fecaf5b47df8d95902 9847826 <nil>"},
		{[]string{"--algorithm", "sliding_window", "--limit", "180", "--window", "1s", "--arrivals-file", trace}, "ee67695478c202581fec264180eecf65511b0c9d4a7556e4738caf3a08564f85 5300104 <nil>"},
		{[]string{"--algorithm", "fixed_window", "--limit", "180", "--window", "1s", "--instances", "3", "--arrivals-file", trace, "--json"}, "22c33464c3e4c7144e24f32642b99114bab343ff17d3eee55b72a928f79f5bf3 11704466 <nil>"},
		{[]string{"--algorithm", "fixed_window", "--limit", "100", "--window", "1m", "--instances", "3", "--arrivals", "0*60@1,0*20@2,0*10@3,61s*40,62s*7:3@2"}, "c52533cecb0eb9613e2ce10a08621417d673acc5084850ccc73a88bf0888833b 8701 <nil>"},
		{[]string{"--algorithm", "concurrency", "--limit", "3", "--hold", "1s", "--lease-ttl", "2s", "--arrivals", "0*5,0.5*3,1*4,2.5*10:2,3.4,30*4"}, "97e54febf2121172676451db11aea2fb942bbafc277afef85d0efb0531a6e5b0 1536 <nil>"},
		{[]string{"--algorithm", "concurrency", "--limit", "40", "--hold", "0.25s", "--arrivals-file", trace, "--json"}, "0b58fd1be1661841f4103ab8fc5be93214141f2f3ffc5191060d8523c3df40a7 9959408 <nil>"},
		{[]string{"--algorithm", "concurrency", "--limit", "4", "--lease-ttl", "15ms", "--hold", "15ms", "--arrivals-file", trace}, "87b36501f8eb79a9d9cda777aff384eb92883a0dcbca47f00a5d56bfa66e6f6b 5300114 <nil>"},
		{[]string{"--algorithm", "concurrency", "--limit", "5", "--lease-ttl", "20ms", "--hold", "1h", "--arrivals", "0*3,0.005*4,0.01,0.02*6,0.025*2:2,0.03,0.04*2,0.06"}, "ec7afc90e8d43949c99c3d0591d9bb1881b99f319111278d530eb08cdb169f29 1167 <nil>"},
		{[]string{"--algorithm", "quota", "--limit", "1000", "--period", "day", "--time-zone", "Europe/Berlin", "--start", "2026-03-29T10:00:00+02:00", "--arrivals-file", trace, "--json"}, "a470efdd21ac609b278c457445901e93121dd2a43557f6b6fb898bc038dc78fa 11250048 <nil>"},
		{[]string{"--algorithm", "quota", "--limit", "3", "--period", "month", "--anchor-day", "31", "--offset", "1", "--instances", "2", "--start", "2026-01-30T23:00:00Z", "--arrivals", "0*2,1h*3,48h*4"}, "5abe635bdee907b1dfe35cb2699abee3dd620f4792f8772abf0611fb56c31320 815 <nil>"},
		{[]string{"--algorithm", "token_bucket", "--rate", "150", "--burst", "50", "--arrivals-file", bad}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0 simulate: --arrivals-file trace.txt: line 50003: times must not decrease"},
		{[]string{"--algorithm", "token_bucket", "--rate", "150", "--burst", "50", "--arrivals-file", bad, "--json"}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0 simulate: --arrivals-file trace.txt: line 50003: times must not decrease"},
		{[]string{"--algorithm", "fixed_window", "--limit", "10", "--window", "1s", "--arrivals", "0*5,1*3@2"}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0 simulate: arrival 6 names instance 2 but --instances is not set"},
		{[]string{"--algorithm", "fixed_window", "--limit", "10", "--window", "1s", "--instances", "2", "--arrivals", "0*5,1*3@3"}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0 simulate: arrival 6 goes to instance 3 of only 2"},
		{[]string{"--algorithm", "fixed_window", "--limit", "10", "--window", "1s", "--start", "2262-04-11T23:00:00Z", "--arrivals", "0*5,1h"}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0 simulate: arrival 6: time overflows (past 2262-04-11T23:47:16.854775807Z)"},
	} {
		var out, errb bytes.Buffer
		err := Run(context.Background(), c.args, &out, &errb)
		got := fmt.Sprintf("%x %d %v", sha256.Sum256(out.Bytes()), out.Len(), err)
		for _, p := range []string{trace, bad, never} {
			got = strings.ReplaceAll(got, p, filepath.Base(p))
		}
		if got != c.want {
			t.Errorf("%v:\n got %s\nwant %s", c.args, got, c.want)
		}
	}
}

// heapProbe discards a report and, every every bytes of it, measures the
// heap the run holds then, in the middle of its decisions: held is the
// most it saw.
type heapProbe struct {
	n, next, every int
	held           uint64
}

func (w *heapProbe) Write(p []byte) (int, error) {
	w.n += len(p)
	if w.n >= w.next {
		w.next = w.n + w.every
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		w.held = max(w.held, m.HeapAlloc)
	}
	return len(p), nil
}

// TestMemoryBoundedWhateverTheArrivals: a run of 200,000 arrivals, from
// --arrivals, from a file and from standard input through a pipe, as a
// table and as JSON, holds no more than a few buffers while it writes its
// decisions: not one decision or arrival per request.
func TestMemoryBoundedWhateverTheArrivals(t *testing.T) {
	// Not parallel: the heap measured is the run's own.
	const n = 200_000
	trace := writeTrace(t, n, "")
	for _, args := range [][]string{
		{"--algorithm", "fixed_window", "--limit", "100", "--window", "1s", "--arrivals", fmt.Sprintf("0*%d,1*%d", n/2, n/2)},
		{"--algorithm", "token_bucket", "--rate", "150", "--burst", "50", "--arrivals-file", trace, "--json"},
		{"--algorithm", "fixed_window", "--limit", "100", "--window", "1s", "--instances", "4", "--arrivals-file", trace},
		{"--algorithm", "concurrency", "--limit", "40", "--hold", "0.25s", "--arrivals-file", "-"},
		// Every arrival admitted, its lease expired long before its hold ends.
		{"--algorithm", "concurrency", "--limit", "3", "--lease-ttl", "1ms", "--hold", "1h", "--arrivals-file", trace},
	} {
		// Standard input from a pipe, which cannot be read twice.
		pr, pw := io.Pipe()
		go func() {
			f, err := os.Open(trace)
			if err == nil {
				_, err = io.Copy(pw, f)
				f.Close()
			}
			pw.CloseWithError(err)
		}()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		probe := &heapProbe{next: 1 << 20, every: 2 << 20}
		err := run(args, pr, probe)
		pr.Close()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		const bound = 2 << 20
		if held := int64(probe.held) - int64(m.HeapAlloc); probe.held == 0 || held > bound {
			t.Errorf("%v: %d bytes of report, %.1f MiB held while writing them, want at most %d MiB",
				args, probe.n, float64(held)/(1<<20), bound>>20)
		} else {
			t.Logf("%v: %.2f MiB held", args[1], float64(held)/(1<<20))
		}
	}
}
