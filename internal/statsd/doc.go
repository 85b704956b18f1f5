// Package statsd sends statsd lines ("name:value|c", "|g", "|ms") to a
// statsd server over TCP or UDP.
//
// A Client never blocks its callers on the network: lines go into a
// buffer of bounded size (lines past the bound are dropped and counted),
// and one goroutine sends the buffer every FlushInterval, or at once when
// Flush is called. Every network call has a deadline. When the connection
// fails the Client dials again, at most once every RetryInterval, and
// keeps the lines it could not send for the next connection (within the
// bound); a line is never sent cut in two.
package statsd
