package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/app"
)

// TestRLSSetsASoftMemoryLimit: floodgate rls sets the runtime's soft
// memory limit as serve does (its store's cap, a tenth of it and what the
// rest of the process needs, within nine tenths of a container's memory
// limit), gives it back when it stops, and leaves it to GOMEMLIMIT when
// that is set. Before, the service had none: in a container, connections
// and answers piling up grew the heap to twice what was live, past the
// container's limit, where the kernel killed it rather than the collector
// working.
func TestRLSSetsASoftMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n"})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory"}))
	got := metricFloat(t, p.debug, "go_gc_gomemlimit_bytes")
	lo := float64(config.DefaultMemoryMaxBytes + config.DefaultMemoryMaxBytes/10 + app.SoftLimitFloor)
	if got < lo || got == math.MaxInt64 {
		t.Errorf("floodgate rls on the memory store: GOMEMLIMIT %.0f, want at least %.0f (the store's cap, a tenth of it and the floor)", got, lo)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Errorf("after floodgate rls stopped the soft memory limit is %d, want the one before it started, %d", after, before)
	}

	p = startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "GOMEMLIMIT": "off"}))
	if got := metricFloat(t, p.debug, "go_gc_gomemlimit_bytes"); got != float64(before) {
		t.Errorf("GOMEMLIMIT=off: the limit is %.0f, want the one GOMEMLIMIT left, %d", got, before)
	}
}
