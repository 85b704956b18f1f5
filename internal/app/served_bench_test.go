package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/racecheck"
)

// servedRejectPolicy is the 429 path's policy of scripts/bench-gateway.sh,
// read from the file the script reads: a per-address limit of one request
// a minute, admin and ops listeners off.
const servedRejectPolicy = "../../scripts/bench-gateway/reject.yaml"

// servedRejecter starts a gateway on servedRejectPolicy as floodgate serve
// builds it, spends the limit of the request it returns, and stops it when
// tb ends.
func servedRejecter(tb testing.TB) (*gateway.Gateway, *gateway.Request) {
	tb.Helper()
	path, err := filepath.Abs(servedRejectPolicy)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := newServer(ctx, &ServeOptions{Config: path, Listen: "127.0.0.1:0"}, log)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.close() })
	if err := s.listen(io.Discard); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.shutdown(context.Background()) })
	g := s.gateway.Load()
	peer := netip.MustParseAddr("192.0.2.1")
	r := &gateway.Request{Method: "GET", Host: "gateway.example", Path: "/x", Proto: "HTTP/1.1", Peer: peer,
		PeerText: peer.String(), Header: emptyHeader{}, NoOverride: true}
	g.Handle(ctx, r, gateway.HandleOptions{}).Done(0) // spends the burst
	return g, r
}

// refuseOnce decides r on g and reports whether it was refused (429); it
// fails tb otherwise.
func refuseOnce(tb testing.TB, g *gateway.Gateway, r *gateway.Request) bool {
	h := g.Handle(context.Background(), r, gateway.HandleOptions{})
	defer h.Done(0)
	if h.Status != 429 {
		tb.Errorf("status %d, want 429", h.Status)
		return false
	}
	return true
}

// TestServedRefusalAllocatesNothing: a client refused again and again
// costs no allocation on the request path (its counter key and its
// RateLimit value are the strings built for its first refusal), so a
// flood does not make the collector run.
func TestServedRefusalAllocatesNothing(t *testing.T) {
	if racecheck.Enabled {
		t.Skip("under the race detector sync.Pool drops items at random: allocations are not counted")
	}
	g, r := servedRejecter(t)
	// AllocsPerRun counts the whole process's allocations, which the
	// server's own goroutines add to: the least of a few runs is the
	// request's own.
	least := math.MaxFloat64
	for range 5 {
		least = min(least, testing.AllocsPerRun(500, func() { refuseOnce(t, g, r) }))
	}
	if least != 0 {
		t.Errorf("a refusal allocates %v times", least)
	}
}

// BenchmarkServedReject: the 429 path of a gateway built as floodgate
// serve builds it (its metrics, the console's observers and gatekeeper,
// the default field switches), a request refused by a per-address limit,
// decided in process: the request flow's own cost a refusal, without the
// HTTP engine and the connection (gateway/edge's BenchmarkEdgeReject has
// those parts).
//
// alone runs the flow back to back, its code and data hot in the CPU's
// caches. between-syscalls runs it between the system calls of a request
// and its answer (a write and a read each way on a socket pair), as a
// server runs it, and syscalls-only runs those calls alone: the flow's
// cost there is the difference of the two, which is what a server pays.
// On the 2-core test machine it was about 1.4 times its cost alone.
func BenchmarkServedReject(b *testing.B) {
	g, r := servedRejecter(b)
	refuse := func(b *testing.B) bool { return refuseOnce(b, g, r) }
	b.Run("alone", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && refuse(b) {
			}
		})
	})
	b.Run("between-syscalls", func(b *testing.B) { benchBetweenSyscalls(b, refuse) })
	b.Run("syscalls-only", func(b *testing.B) { benchBetweenSyscalls(b, nil) })
}

// BenchmarkServedRejectCold times the same refusal after the CPU's caches
// lost what it touches, as in a server, where the kernel, the other
// threads and the load generator run between two requests: before each
// refusal a buffer of evict bytes is written through (not timed), and
// flow-ns/op is the refusal's own time. evict=0MiB is the refusal with
// warm caches.
func BenchmarkServedRejectCold(b *testing.B) {
	g, r := servedRejecter(b)
	for _, mib := range []int{0, 1, 3} {
		evict := make([]byte, mib<<20)
		b.Run(fmt.Sprintf("evict=%dMiB", mib), func(b *testing.B) {
			var spent time.Duration
			n := 0
			for b.Loop() {
				for i := 0; i < len(evict); i += 64 {
					evict[i]++
				}
				t := time.Now()
				if !refuseOnce(b, g, r) {
					return
				}
				spent += time.Since(t)
				n++
			}
			if n > 0 {
				b.ReportMetric(float64(spent.Nanoseconds())/float64(n), "flow-ns/op")
			}
		})
	}
}

// benchBetweenSyscalls runs f (when not nil) between the system calls of a
// request and its answer: a write of a request's size and its read, then a
// write of an answer's size and its read, on a Unix socket pair.
func benchBetweenSyscalls(b *testing.B, f func(*testing.B) bool) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	buf := make([]byte, 512)
	xfer := func(from, to, n int) {
		if _, err := syscall.Write(from, buf[:n]); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			m, err := syscall.Read(to, buf)
			if err != nil {
				b.Fatal(err)
			}
			got += m
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		xfer(fds[0], fds[1], 90) // the request
		if f != nil && !f(b) {
			return
		}
		xfer(fds[1], fds[0], 230) // the answer
	}
}

// emptyHeader is a request without header fields.
type emptyHeader struct{}

func (emptyHeader) Get(string) string      { return "" }
func (emptyHeader) Values(string) []string { return nil }
