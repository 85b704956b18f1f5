package memstore_test

import (
	"bufio"
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

var rssCapMiB = flag.Int64("memstore.rsscap", 64, "MaxBytes of BenchmarkRSSAtCap, in MiB")

// vmRSS returns the process's resident set size from /proc/self/status, or
// 0 where there is none.
func vmRSS() int64 { return procStatus("VmRSS:") }

// procStatus returns a size in bytes from /proc/self/status, or 0.
func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// settled collects the garbage and returns the memory to the system, then
// reads the heap in use and the resident set size.
func settled() (heap uint64, rss int64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, vmRSS()
}

// ipKey returns a client-IP key as the policy builds it: "ip:" and an IPv4
// address, in a string of its own.
func ipKey(buf []byte, rng *rand.Rand) ([]byte, string) {
	v := rng.Uint32()
	buf = append(buf[:0], "ip:"...)
	for i := 3; i >= 0; i-- {
		buf = strconv.AppendUint(buf, uint64(v>>(8*i)&0xff), 10)
		if i > 0 {
			buf = append(buf, '.')
		}
	}
	return buf, string(buf)
}

// BenchmarkRSSAtCap fills a store capped by MaxBytes (-memstore.rsscap MiB,
// default 64) with twice as many distinct client-IP keys as fit, each
// holding a login-like window, then reports the resident set size and the
// heap in use (after a collection) against the cap. Run it alone:
//
//	go test -run '^$' -bench RSSAtCap -benchtime 1x ./store/memstore -memstore.rsscap 256
func BenchmarkRSSAtCap(b *testing.B) {
	capBytes := *rssCapMiB << 20
	r := ruletest.Rule(b, floodgate.Limit{Name: "login", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour})
	for b.Loop() {
		heap0, rss0 := settled()
		s, err := memstore.New(memstore.Options{MaxBytes: capBytes, SweepInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(11, 12))
		hits := make([]limiter.Hit, 1)
		out := make([]floodgate.Decision, 1)
		var buf []byte
		n := int(2 * capBytes / 100) // about twice what fits
		for range n {
			buf, hits[0].Key = ipKey(buf, rng)
			hits[0].Rule, hits[0].Cost = r, 1
			if err := s.Decide(context.Background(), hits, false, out); err != nil {
				b.Fatal(err)
			}
		}
		hits[0] = limiter.Hit{}
		heap1, rss1 := settled()
		st := s.Stats()
		b.ReportMetric(float64(st.Keys), "keys")
		b.ReportMetric(float64(st.Bytes)/float64(capBytes), "counted/cap")
		b.ReportMetric(float64(heap1-heap0)/float64(capBytes), "heap/cap")
		b.ReportMetric(float64(rss1-rss0)/float64(capBytes), "rss-delta/cap")
		b.ReportMetric(float64(rss1)/float64(capBytes), "rss/cap")
		b.ReportMetric(float64(procStatus("VmHWM:"))/float64(capBytes), "peak-rss/cap")
		b.ReportMetric(float64(heap1-heap0)/float64(st.Keys), "heap-bytes/key")
		runtime.KeepAlive(s)
		s.Close()
	}
}

// TestHeapWithinCap fills a store capped at 8 MiB with four times as many
// distinct client-IP keys as fit, then checks the heap the store keeps
// against its own count and the cap: the count must not fall short of
// what the keys really take, so that the cap bounds the memory. Each key
// comes as a string of its own that the caller drops, as the policy makes
// them, and the garbage of that size class around the keys is what a
// store that kept each key as a small object of its own would be pinned
// by.
func TestHeapWithinCap(t *testing.T) {
	const capBytes = 8 << 20
	r := ruletest.Rule(t, floodgate.Limit{Name: "login", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour})
	heap0, _ := settled()
	s := newStore(t, memstore.Options{MaxBytes: capBytes, SweepInterval: -1})
	rng := rand.New(rand.NewPCG(13, 14))
	hits := make([]limiter.Hit, 1)
	out := make([]floodgate.Decision, 1)
	var buf []byte
	for range 4 * capBytes / 100 {
		buf, hits[0].Key = ipKey(buf, rng)
		hits[0].Rule, hits[0].Cost = r, 1
		if err := s.Decide(context.Background(), hits, false, out); err != nil {
			t.Fatal(err)
		}
	}
	hits[0] = limiter.Hit{}
	heap1, _ := settled()
	st := s.Stats()
	heap := int64(heap1) - int64(heap0)
	t.Logf("%d keys: %d bytes counted, %d bytes of heap in use (%.3f of the cap)", st.Keys, st.Bytes, heap, float64(heap)/capBytes)
	if st.Bytes > capBytes || st.Evictions == 0 {
		t.Fatalf("stats %+v: want the cap reached and kept", st)
	}
	if heap > capBytes*11/10 {
		t.Errorf("the store keeps %d bytes of heap, more than 110%% of its cap %d", heap, capBytes)
	}
	if heap > st.Bytes*11/10 {
		t.Errorf("the store keeps %d bytes of heap, more than 110%% of the %d it counts", heap, st.Bytes)
	}
	runtime.KeepAlive(s)
}

// TestSettledWithinByteCap: the settles a store keeps so that the same
// settle sent again is answered alike (limiter.SettledTTL) take at most a
// sixteenth of MaxBytes beside the keys, however many reservations of
// distinct keys are made and settled within that time: a check API
// client that reserves and settles under ever new keys (as many as
// MaxReservations and more) grows the heap by no more than the cap and
// that share.
func TestSettledWithinByteCap(t *testing.T) {
	const capBytes = 8 << 20
	r := ruletest.Rule(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour})
	heap0, _ := settled()
	s := newStore(t, memstore.Options{MaxBytes: capBytes, SweepInterval: -1})
	pad := strings.Repeat("k", 200)
	out := make([]floodgate.Decision, 1)
	so := make([]limiter.Settled, 1)
	const n = memstore.DefaultMaxReservations + memstore.DefaultMaxReservations/2
	again := limiter.Hit{}
	for i := range n {
		h := limiter.Hit{Rule: r, Key: pad + strconv.Itoa(i), Cost: 5, Lease: uint64(i + 1), Reserve: true, TTL: 5 * time.Minute}
		if err := s.Reserve(context.Background(), []limiter.Hit{h}, out); err != nil || !out[0].Allowed {
			t.Fatalf("reserve %d: %+v %v", i, out[0], err)
		}
		h.Cost = 1
		if err := s.Settle(context.Background(), []limiter.Hit{h}, so); err != nil || !so[0].Found {
			t.Fatalf("settle %d: %+v %v", i, so[0], err)
		}
		again = h
	}
	// The last settle, sent again, is still answered as the first was.
	if err := s.Settle(context.Background(), []limiter.Hit{again}, so); err != nil || !so[0].Found {
		t.Fatalf("the last settle sent again: %+v %v, want it answered as it was", so[0], err)
	}
	heap1, _ := settled()
	st := s.Stats()
	heap := int64(heap1) - int64(heap0)
	t.Logf("%d reservations settled: %d keys, %d bytes counted, %d bytes of heap in use (%.3f of the cap)", n, st.Keys, st.Bytes, heap, float64(heap)/capBytes)
	if limit := int64(capBytes) * 5 / 4; heap > limit {
		t.Errorf("the store keeps %d bytes of heap after %d settles of distinct keys, more than 125%% of its cap %d", heap, n, capBytes)
	}
	runtime.KeepAlive(s)
}

// TestReservationsWithinByteCap: the settle records of reservations left
// hanging (requests that reserve and never settle, under ever new keys:
// as many as MaxReservations and more) take at most an eighth of
// MaxBytes beside the keys, the oldest settling at their estimates to
// make room, so they grow the heap by no more than the cap and that
// share; the newest reservation still settles.
func TestReservationsWithinByteCap(t *testing.T) {
	const capBytes = 8 << 20
	r := ruletest.Rule(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour})
	heap0, _ := settled()
	s := newStore(t, memstore.Options{MaxBytes: capBytes, SweepInterval: -1})
	pad := strings.Repeat("k", 200)
	out := make([]floodgate.Decision, 1)
	const n = memstore.DefaultMaxReservations + memstore.DefaultMaxReservations/2
	last := limiter.Hit{}
	for i := range n {
		last = limiter.Hit{Rule: r, Key: pad + strconv.Itoa(i), Cost: 5, Lease: uint64(i + 1), Reserve: true, TTL: 5 * time.Minute}
		if err := s.Reserve(context.Background(), []limiter.Hit{last}, out); err != nil || !out[0].Allowed {
			t.Fatalf("reserve %d: %+v %v", i, out[0], err)
		}
	}
	heap1, _ := settled()
	st := s.Stats()
	heap := int64(heap1) - int64(heap0)
	t.Logf("%d reservations left hanging: %d held, %d keys, %d bytes counted, %d bytes of heap in use (%.3f of the cap)",
		n, st.Reservations, st.Keys, st.Bytes, heap, float64(heap)/capBytes)
	if limit := int64(capBytes) * 5 / 4; heap > limit {
		t.Errorf("the store keeps %d bytes of heap after %d reservations of distinct keys, more than 125%% of its cap %d", heap, n, capBytes)
	}
	so := make([]limiter.Settled, 1)
	last.Cost = 1
	if err := s.Settle(context.Background(), []limiter.Hit{last}, so); err != nil || !so[0].Found {
		t.Errorf("the newest reservation's settle: %+v %v, want it found", so[0], err)
	}
	runtime.KeepAlive(s)
}
