// Package console is the operator's side of floodgate serve: the API keys
// managed at run time (package keystore), the admin API and its audit log
// (admin), the live dashboard (dashboard) and the quota alarms (alarm),
// observing the engine's decisions.
//
// What the instances of a deployment share (the keys, the audit log, the
// alarms' deduplication and the dashboard's aggregates) lives where their
// counters do. On a Redis store it goes through the store's own client
// (the RedisStore port: package redisstore's Store), so that it reaches
// Redis with the store's TLS settings, credentials and Sentinel or Cluster
// topology; on the memory store, in files beside the state file. Changes
// to the keys reach the other instances by their version counter, polled
// every 100 ms: a subscription on the store's connections would make them
// look as if Redis owed a reply, which the store's progress tracking
// (package redisstore, Progress) must not be told.
package console
