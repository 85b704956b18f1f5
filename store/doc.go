// Package store opens the store a URL names: "memory" for the embedded
// store (package memstore), redis://, rediss://, redis+cluster://,
// redis+sentinel:// (and their rediss+ forms) and redis+unix:// for Redis
// (package redisstore). Each store registers its schemes with Register, in
// the manner of database/sql's drivers; a program opens the stores whose
// packages it imports. Every command of the binary that opens a store
// opens it with Open, and the policy file's server.store is validated with
// the same schemes' own checks (Check), so that a URL the configuration
// accepts is one the store opens.
//
// # Adding a store
//
// A store touches six places, three of them in its own package:
//
//  1. store/NAME: a type that implements limiter.Store (Decide), and
//     the optional verbs it can keep: limiter.Releaser (concurrency
//     limits), limiter.Refunder, limiter.Reserver (reservations),
//     limiter.Leaser (leased rules), limiter.InProcess or
//     limiter.ReplyClock (how the engine times its calls). The engine
//     finds them by type assertion; a verb left out is refused or done
//     the older way, as limiter.Store says.
//  2. store/NAME/open.go: an init function that registers its schemes
//     with Register: a Driver whose Check accepts or refuses a URL
//     without connecting, and whose Open reads the fields of Options
//     that concern it.
//  3. store/NAME's tests: storetest.Run (and storetest.RunReservations
//     for a Reserver; the Clocked forms when the store can read a clock
//     it is given).
//  4. internal/app/store.go: an import of the package, so that the
//     binary registers the schemes.
//  5. store/open_test.go: TestSchemesAreTheStores lists every scheme.
//  6. schema/gen/notes.go: the pattern of server.store, then go generate
//     ./schema.
//
// Nothing else names a store: configuration, the engine, the command
// line and the local fallback of a shared store go through Open and
// Check. Besides, the list of schemes is written for people in this
// comment, in config.Server.Store, in config's doc.go and in the README's
// layout. Optional: the
// store's own gauges in internal/app/metrics.go, and, for a store shared
// between instances, a port for the console's shared state (keys, audit,
// alarms and dashboard; today console.RedisStore), without which each
// instance keeps that state in files of its own.
package store
