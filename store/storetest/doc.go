// Package storetest is the conformance suite every limiter.Store must pass:
// the same behaviour tests for the embedded store and for Redis, standalone
// and Cluster.
//
// The tests use the real clock of the store (for Redis, the server's), so
// they are built to be independent of it: rates of one unit an hour,
// windows of hours or longer, and generous waits where time must pass.
// Every subtest uses keys of its own, so a store may be shared between
// subtests and between runs.
package storetest
