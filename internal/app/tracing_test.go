package app

import (
	"context"
	"testing"
)

// TestTracingOffByDefault: without OTEL_* variables nothing is traced.
func TestTracingOffByDefault(t *testing.T) {
	empty := func(string) string { return "" }
	tr, err := newTracing(context.Background(), empty)
	if err != nil || tr.on() {
		t.Fatalf("no variables: on=%v err=%v", tr != nil && tr.on(), err)
	}
	none := func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}[k]
	}
	if tr, err := newTracing(context.Background(), none); err != nil || tr.on() {
		t.Fatalf("OTEL_TRACES_EXPORTER=none: on=%v err=%v", tr != nil && tr.on(), err)
	}
	bad := func(k string) string { return map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}[k] }
	if _, err := newTracing(context.Background(), bad); err == nil {
		t.Fatal("an exporter that is not supported was accepted")
	}
}
