// Package store opens the store a URL names: "memory" for the embedded
// store (package memstore), redis://, rediss://, redis+cluster://,
// redis+sentinel:// (and their rediss+ forms) and redis+unix:// for Redis
// (package redisstore). Each store registers its schemes with Register, in
// the manner of database/sql's drivers; a program opens the stores whose
// packages it imports. Every command of the binary that opens a store
// opens it with Open, and the policy file's server.store is validated with
// the same schemes' own checks (Check), so that a URL the configuration
// accepts is one the store opens.
package store
