// Package storetest is the conformance suite every limiter.Store must pass:
// the same behaviour tests for the embedded store and for Redis, standalone
// and Cluster.
//
// Run and RunReservations use the store's own clock, so the tests are
// built to be independent of it: rates of one unit an hour, windows of
// hours or longer, and generous waits where time must pass (a window's
// end, a reservation's expiry, a day's end for a calendar quota).
// RunClocked and RunReservationsClocked give the stores a Clock instead,
// which stands still until the suite moves it on: where Run would wait,
// they move the clock, and no test sleeps. The embedded store takes it
// as its Options.Now. Redis cannot: a script reads the server's TIME, and
// keys expire by the server's clock, so a Redis store runs Run and its
// tests wait for real time to pass.
//
// Every subtest uses keys of its own, so a store may be shared between
// subtests and between runs.
package storetest
