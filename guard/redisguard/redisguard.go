// Package redisguard lets a Guard (package guard) count in Redis: give
// Open to guard.Options.OpenStore, and a policy whose server.store (or
// Options.StoreURL) is a Redis URL is counted there, shared by every
// instance of the service.
//
//	g, err := guard.New(guard.File("policy.yaml"), guard.Options{OpenStore: redisguard.Open})
//
// It is a package of its own so that a program that counts in memory
// compiles no Redis client.
package redisguard

import (
	"fmt"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// Open opens the Redis store c names (redis://, rediss://,
// redis+cluster:// or redis+sentinel://, see redisstore.ParseURL), with
// the defaults of "floodgate serve": a standalone Redis that does not
// answer yet does not fail it (each limit follows its failure policy until
// Redis answers; see redisstore.New). The function it returns closes it.
func Open(c guard.StoreConfig) (limiter.Store, func() error, error) {
	rs, err := redisstore.New(redisstore.Options{URL: c.URL, Logger: c.Logger, RefuseEvictable: c.RefuseEvictable})
	if err != nil {
		return nil, nil, fmt.Errorf("redisguard: %w", err)
	}
	return rs, func() error { rs.Close(); return nil }, nil
}

var _ func(guard.StoreConfig) (limiter.Store, func() error, error) = Open
