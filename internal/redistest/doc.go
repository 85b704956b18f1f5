// Package redistest starts real redis-server processes for tests: a
// standalone server or a three-primary Redis Cluster (with replicas if asked), each on free loopback
// ports in a temporary directory, with no persistence. Every process is
// stopped by its PID when the test (or the test binary, for a shared
// Cluster) ends.
//
// The binaries are looked up in PATH and then in /usr/bin; scripts/test.sh
// installs them when they are missing.
package redistest
