package rls

import (
	"context"
	"runtime"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// entries returns a descriptor of user=value followed by n entries k=v.
func entries(value string, n int) *rlv3.RateLimitDescriptor {
	d := desc("user", value)
	for range n {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	return d
}

// TestMoreThan64EntriesRefusedUndecoded: a descriptor of 64 entries is
// decided, one of 65 is refused with InvalidArgument naming it, before
// anything is charged; a call of 200 KB of empty entries (2 bytes each on
// the wire) is refused before it is decoded: it was decided, and decoding
// its 100,000 entries took 14 MiB of heap (a call of 1 MiB, 62 MiB).
// Refused calls are counted as calls and as service errors. MaxEntries
// moves the bound.
func TestMoreThan64EntriesRefusedUndecoded(t *testing.T) {
	st, err := memstore.New(memstore.Options{SweepInterval: -1, Now: newClock().now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	stats, err := NewStats(reg, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No bound on the call's time: the client's message of many entries
	// takes long to write under the race detector on a loaded machine.
	c, _ := serve(t, New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{Stats: stats}),
		ServerOptions{CallTimeout: -1, ExtraOptions: []grpc.ServerOption{grpc.UnaryInterceptor(stats.UnaryInterceptor())}})
	ctx := context.Background()
	limited := func(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
		return d
	}
	if r := ask(t, c, "d", limited(entries("a", 63))); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("64 entries: %v", r)
	}
	_, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "b"), limited(entries("a", 64))}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptor 1: 65 entries, at most 64") {
		t.Fatalf("65 entries: %v, want InvalidArgument", err)
	}
	if r := ask(t, c, "d", desc("user", "b")); r.Statuses[0].LimitRemaining != 9 {
		t.Errorf("the refused request charged user=b: %v", r)
	}

	huge := desc("user", "c")
	for range 100_000 {
		huge.Entries = append(huge.Entries, &rlv3.RateLimitDescriptor_Entry{})
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{huge}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = c.ShouldRateLimit(ctx, req)
	runtime.ReadMemStats(&after)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptor 0: 100001 entries, at most 64") {
		t.Errorf("100,001 entries: %v, want InvalidArgument", err)
	}
	// The client's message and the server's copies of it take about one
	// MiB; its entries decoded took 14.
	if got := after.TotalAlloc - before.TotalAlloc; got > 6<<20 {
		t.Errorf("a call of 200 KB of entries took %d MiB of heap, want under 6", got>>20)
	}

	// The refused calls are counted as calls, and as service errors.
	if got := promtest.Value(t, reg, "ratelimit_service_total_requests", promtest.Labels{"grpc_method": "ShouldRateLimit"}); got != 4 {
		t.Errorf("total_requests = %v, want 4", got)
	}
	if got := promtest.Value(t, reg, "ratelimit_service_should_rate_limit_error", promtest.Labels{"err_type": "service_error"}); got != 2 {
		t.Errorf("service_error = %v, want 2", got)
	}

	c2, _ := startService(t, mustParse(t, basic), newClock(), Options{MaxEntries: 2})
	if r := ask(t, c2, "d", limited(entries("a", 1))); r.OverallCode != ok {
		t.Errorf("2 entries with MaxEntries 2: %v", r)
	}
	_, err = c2.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{entries("a", 2)}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("3 entries with MaxEntries 2: %v, want InvalidArgument", err)
	}
}
