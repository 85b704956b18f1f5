package redisstore

import (
	"context"
	"io"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
)

// The Redis store opens the URLs ParseURL reads.
func init() {
	d := store.Driver{Check: func(u string) error { _, err := ParseURL(u); return err }, Open: open, CheckLimit: CheckLimit}
	for _, s := range []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel", "redis+unix"} {
		store.Register(s, d)
	}
}

// Client returns the store's Redis client, for the state a program keeps
// beside its counters in the same Redis (the console's API keys, audit
// log, alarm deduplication and dashboard), with the store's TLS settings
// and credentials. Closing the store closes it.
//
// For a Cluster or Sentinel deployment that did not answer when the store
// was made, it answers every call at once with an error until the store
// has made the client of that deployment, then passes every call to it:
// it need not be taken again. There, a command built with its B before
// the client was made and sent after is refused on a Cluster (its slot
// was not computed): build each command just before sending it, as
// rueidis asks.
func (s *Store) Client() rueidis.Client { return s.client }

// options are the Redis store's options of o.
func options(u string, o store.Options) Options {
	return Options{URL: u, Prefix: o.Prefix, DialTimeout: o.DialTimeout, WriteTimeout: o.WriteTimeout, TLSConfig: o.TLS,
		SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword, PipelineMultiplex: o.PipelineMultiplex,
		MaxFlushDelay: o.MaxFlushDelay, MaxBatch: o.MaxBatch, BatchesInFlight: o.BatchesInFlight,
		RefuseEvictable: o.RefuseEvictable, Logger: o.Logger, Network: o.Network}
}

func open(_ context.Context, u string, o store.Options) (limiter.Store, io.Closer, error) {
	s, err := New(options(u, o))
	if err != nil {
		return nil, nil, err
	}
	return s, closer{s}, nil
}

// closer closes a store.
type closer struct{ s *Store }

func (c closer) Close() error {
	c.s.Close()
	return nil
}
