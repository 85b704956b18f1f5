// Package app is the composition root of the processes that decide:
// floodgate serve (Serve: the gateway, with Envoy's rate-limit service and
// the HTTP check API beside it when the policy file names them) and
// floodgate rls (RunRLS: Envoy's rate-limit service alone). Both are built
// from Settings by one root: the logger, the metrics registry, the
// OpenTelemetry tracing (the OTEL_* variables), the stores opened by URL
// (package store, with a local fallback store beside a shared one), the
// engine, and the rate-limit service with its TLS. The policy file's
// server section is one source of the Settings, envoyproxy/ratelimit's
// environment variables (ReadEnvoy) another.
//
// Every listener that takes TLS (the rate-limit service's gRPC, the check
// API, the admin listener) reads its certificate again when its files
// change, and with a client CA requires client certificates (TLS). On
// SIGINT or SIGTERM a process stops accepting, lets the requests in flight
// finish, gives leased units back, flushes its spans and closes its stores
// (the memory store writes its state file).
package app
