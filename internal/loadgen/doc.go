// Package loadgen holds the binary's load generators: floodgate bench
// (decisions per second and their latency against a store, through the
// engine as floodgate serve decides, or the store alone) and floodgate
// rls-bench (Floodgate's Envoy rate-limit service, or a gRPC service that
// does nothing, to load, and the load: see scripts/bench-rls.sh). Latency
// is kept in log-linear histograms, 16 buckets per power of two.
package loadgen
