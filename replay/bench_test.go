package replay

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

// benchLines is the length of the benchmarks' logs.
const benchLines = 1_000_000

// schoolPolicy is the bundled example: 14 limits of every kind.
func schoolPolicy(b testing.TB) *policy.Policy {
	f, err := config.Load(filepath.Join("..", "examples", "school.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// schoolTraffic is n requests to the school's routes over about d, from
// a few thousand addresses (a few of them busy), with API keys known and
// unknown and logins that fail; in the order a log writes them.
func schoolTraffic(n int, d time.Duration) []*accesslog.Record {
	rng := rand.New(rand.NewPCG(42, 42))
	zipf := rand.NewZipf(rng, 1.2, 8, 4999)
	recs := make([]*accesslog.Record, n)
	step := d / time.Duration(n)
	at := t0
	for i := range recs {
		at = at.Add(time.Duration(rng.Int64N(int64(2 * step))))
		ipn := zipf.Uint64()
		ip := netip.AddrFrom4([4]byte{10, byte(ipn >> 16), byte(ipn >> 8), byte(ipn)})
		r := &accesslog.Record{Time: at, ClientIP: ip, Method: "GET", Status: 200, Proto: "HTTP/1.1",
			Duration: time.Duration(rng.Int64N(int64(20 * time.Millisecond))), Decision: accesslog.Allow, UserAgent: "bench/1"}
		switch k := rng.IntN(100); {
		case k < 50:
			r.Path, r.Route = fmt.Sprintf("/notices/%d", rng.IntN(500)), "notices"
			if rng.IntN(3) == 0 {
				r.User = fmt.Sprintf("parent-%d", rng.IntN(2000))
			}
		case k < 75:
			r.Path, r.Route = fmt.Sprintf("/students/%d", rng.IntN(300)), "students"
		case k < 90:
			r.Path, r.Route = fmt.Sprintf("/partner/students/%d", rng.IntN(300)), "partner-students"
			r.Key = []string{"partner-1", "trial-1", "?716fbdb08eacfc2dee9f2297c2367d16"}[rng.IntN(3)]
		default:
			r.Method, r.Path, r.Route = "POST", "/login", "login"
			if rng.IntN(2) == 0 {
				r.Status = 401
			}
		}
		recs[i] = r
	}
	return recs
}

// decided fills in the decisions the policy makes on recs (as the gateway
// would have logged them) and puts them in the order a log writes them:
// by the end of each request.
func decided(b testing.TB, p *policy.Policy, recs []*accesslog.Record) []*accesslog.Record {
	rp, err := NewReplayer(p)
	if err != nil {
		b.Fatal(err)
	}
	defer rp.Close()
	for _, r := range recs {
		rec := Record{Time: r.Time.UnixNano(), ClientIP: r.ClientIP, Method: r.Method, Path: r.Path, Status: r.Status,
			Duration: r.Duration, Key: r.Key, User: r.User}
		o := rp.Decide(&rec)
		switch {
		case o.Forbidden:
			r.Decision, r.Status = accesslog.None, 403
		case o.Denied:
			r.Decision, r.Status = accesslog.Deny, 429
		default:
			r.Decision = accesslog.Allow
		}
		if l := o.Binding(); l != nil {
			r.Limit = l.Name
		}
	}
	sort.SliceStable(recs, func(i, j int) bool {
		return recs[i].Time.Add(recs[i].Duration).Before(recs[j].Time.Add(recs[j].Duration))
	})
	return recs
}

// writeBenchLog writes recs in the format of append, gzipped or not.
func writeBenchLog(b *testing.B, recs []*accesslog.Record, name string, zip bool, appendLine func([]byte, *accesslog.Record) []byte) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	var w io.Writer = f
	var zw *gzip.Writer
	if zip {
		zw = gzip.NewWriter(f)
		w = zw
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var line []byte
	for _, r := range recs {
		line = appendLine(line[:0], r)
		bw.Write(line)
	}
	bw.Flush()
	if zw != nil {
		zw.Close()
	}
	f.Close()
	return path
}

// nginxCombinedLine writes a record as NGINX's combined format does (the
// log time, to the second, is the end of the request).
func nginxCombinedLine(b []byte, r *accesslog.Record) []byte {
	end := r.Time.Add(r.Duration).UTC()
	return fmt.Appendf(b, "%s - - [%s] \"%s %s %s\" %d %d \"-\" \"%s\"\n", r.ClientIP, end.Format("02/Jan/2006:15:04:05 -0700"),
		r.Method, r.Path, r.Proto, r.Status, r.Bytes, r.UserAgent)
}

func benchReplay(b *testing.B, path string, want string) {
	p := schoolPolicy(b)
	fi, _ := os.Stat(path)
	runtime.GC() // the traffic the log was made of is garbage: measure the replay's heap
	var r *Report
	cpu0 := cpuSeconds()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var err error
		if r, err = Run(context.Background(), Options{Policy: p, Logs: []string{path}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// The CPU the replay used (its goroutines and the collector's), which
	// other work on the machine disturbs less than the wall time.
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
	if r.Requests != benchLines || r.Logs[0].Format != want || r.Denied == 0 {
		b.Fatalf("%d requests, format %s, %d denied", r.Requests, r.Logs[0].Format, r.Denied)
	}
	b.ReportMetric(float64(benchLines)/(float64(b.Elapsed().Seconds())/float64(b.N)), "lines/s")
	b.ReportMetric(float64(fi.Size())/(1<<20), "log-MB")
	b.ReportMetric(float64(r.Resources.PeakHeapBytes)/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(r.Resources.PeakKeys), "peak-keys")
}

// BenchmarkReplayJSON1M replays a million lines of Floodgate's JSON access
// log (three hours of the school's traffic) through the school's policy:
// one op is the whole log.
func BenchmarkReplayJSON1M(b *testing.B) {
	recs := decided(b, schoolPolicy(b), schoolTraffic(benchLines, 3*time.Hour))
	benchReplay(b, writeBenchLog(b, recs, "access.log", false, accesslog.AppendJSON), FormatJSON)
}

// BenchmarkReplayJSON1MGzip is the same log gzipped.
func BenchmarkReplayJSON1MGzip(b *testing.B) {
	recs := decided(b, schoolPolicy(b), schoolTraffic(benchLines, 3*time.Hour))
	benchReplay(b, writeBenchLog(b, recs, "access.log.gz", true, accesslog.AppendJSON), FormatJSON)
}

// BenchmarkReplayNginx1M is the same traffic in NGINX's combined format.
func BenchmarkReplayNginx1M(b *testing.B) {
	recs := decided(b, schoolPolicy(b), schoolTraffic(benchLines, 3*time.Hour))
	benchReplay(b, writeBenchLog(b, recs, "access.log", false, nginxCombinedLine), FormatNginx)
}

// BenchmarkReplayMemory replays logs of 100,000 and 1,000,000 lines of the
// same traffic rate: the peak heap follows the traffic and the policy's
// keys, not the log's length.
func BenchmarkReplayMemory(b *testing.B) {
	for _, n := range []int{benchLines / 10, benchLines} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			recs := decided(b, schoolPolicy(b), schoolTraffic(n, time.Duration(n)*(3*time.Hour/benchLines)))
			path := writeBenchLog(b, recs, "access.log", false, accesslog.AppendJSON)
			recs = nil
			runtime.GC()
			p := schoolPolicy(b)
			var r *Report
			for b.Loop() {
				var err error
				if r, err = Run(context.Background(), Options{Policy: p, Logs: []string{path}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(r.Resources.PeakHeapBytes)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(r.Resources.PeakKeys), "peak-keys")
			b.ReportMetric(float64(r.Resources.PeakHeld), "peak-held")
		})
	}
}
