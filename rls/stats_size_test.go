package rls

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestStatsNamesFromRequestsBoundedInBytes: the statistics series made
// from request values are bounded in the memory they hold and the size of
// a scrape, not only in number: requests whose unknown domain or
// detailed_metric value is half a megabyte (a gRPC message holds up to
// 1 MiB) keep no such name. With the default bound of 10,000 names, names
// of that size would hold gigabytes.
func TestStatsNamesFromRequestsBoundedInBytes(t *testing.T) {
	reg := prometheus.NewRegistry()
	st, c := detailedUsers(t, reg, StatsOptions{})
	const n, size = 32, 512 << 10
	big := func(i int) string { return fmt.Sprintf("%03d%s", i, strings.Repeat("x", size)) }
	ask(t, c, "d", desc("user", "warm"))
	ask(t, c, "warm", desc("k", "v"))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		ask(t, c, "d", desc("user", big(i)))
		ask(t, c, big(i), desc("k", "v"))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	scrape := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			scrape += len(mf.GetName())
			for _, l := range m.GetLabel() {
				scrape += len(l.GetName()) + len(l.GetValue())
			}
		}
	}
	t.Logf("%d requests of %d KiB names: heap grew %d MiB, a scrape holds %d KiB of names and labels",
		2*n, size>>10, grown>>20, scrape>>10)
	if grown > 8<<20 {
		t.Errorf("the heap grew %d MiB after %d requests with names of %d KiB, want at most 8 MiB", grown>>20, 2*n, size>>10)
	}
	if scrape > 1<<20 {
		t.Errorf("a scrape holds %d KiB of metric names and label values, want at most 1 MiB", scrape>>10)
	}
	runtime.KeepAlive(st)
}

// TestRequestNamedLimitsBoundedInBytes: limits given in requests, named by
// their descriptor's path, hold memory and scrape size bounded whatever
// their values' length, as their number is (metrics.DefaultMaxLimits).
func TestRequestNamedLimitsBoundedInBytes(t *testing.T) {
	ask, reg := startMetered(t)
	const n, size = 16, 512 << 10
	ask(withLimit(desc("client", "warm")))
	for i := range n {
		ask(withLimit(desc("client", fmt.Sprintf("%03d%s", i, strings.Repeat("x", size)))))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	scrape := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				scrape += len(l.GetValue())
			}
		}
	}
	if scrape > 1<<20 {
		t.Errorf("a scrape holds %d KiB of label values after %d limits named by %d KiB values, want at most 1 MiB", scrape>>10, n, size>>10)
	}
}
