package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
)

// tracing is the optional OpenTelemetry tracing of the front ends: a
// span per request at the HTTP and gRPC boundaries, never inside the
// algorithms. It is off unless the standard environment asks for it.
type tracing struct {
	provider *sdktrace.TracerProvider // nil when off
	prop     propagation.TextMapPropagator
}

// newTracing reads the standard OTEL_* variables (getenv is os.Getenv):
// tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset
// and an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is given. OTEL_EXPORTER_OTLP_PROTOCOL
// picks grpc or http/protobuf (the default); the exporter and the SDK read
// the rest (endpoint, headers, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER ...).
func newTracing(ctx context.Context, getenv func(string) string) (*tracing, error) {
	t := &tracing{prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return t, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return t, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch proto {
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	t.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	return t, nil
}

// on reports whether requests are traced.
func (t *tracing) on() bool { return t.provider != nil }

// handler wraps an HTTP front end: one span per request, named after the
// front end and the method ("gateway GET"), continuing a trace the request
// carries.
func (t *tracing) handler(h http.Handler, name string) http.Handler {
	if !t.on() {
		return h
	}
	return otelhttp.NewHandler(h, name, otelhttp.WithTracerProvider(t.provider), otelhttp.WithPropagators(t.prop),
		otelhttp.WithSpanNameFormatter(func(op string, r *http.Request) string { return op + " " + r.Method }))
}

// grpcOptions are the gRPC server options of the Envoy rate-limit service.
func (t *tracing) grpcOptions() []grpc.ServerOption {
	if !t.on() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider), otelgrpc.WithPropagators(t.prop)))}
}

// shutdown flushes the spans not yet exported.
func (t *tracing) shutdown(ctx context.Context) error {
	if !t.on() {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
