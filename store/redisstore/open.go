package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
)

// The Redis store opens the URLs ParseURL reads, and redis+unix://
// (Unix sockets).
func init() {
	d := store.Driver{Check: func(u string) error { _, err := ParseURL(u); return err }, Open: open}
	for _, s := range []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} {
		store.Register(s, d)
	}
	store.Register("redis+unix", store.Driver{Check: func(u string) error { _, _, _, err := parseUnixURL(u); return err }, Open: openUnix})
}

// Client returns the store's Redis client, for the state a program keeps
// beside its counters in the same Redis (the console's API keys, audit
// log, alarm deduplication and dashboard), with the store's TLS settings
// and credentials. Closing the store closes it.
func (s *Store) Client() rueidis.Client { return s.client }

// options are the Redis store's options of o.
func options(u string, o store.Options) Options {
	return Options{URL: u, Prefix: o.Prefix, DialTimeout: o.DialTimeout, WriteTimeout: o.WriteTimeout, TLSConfig: o.TLS,
		SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword, PipelineMultiplex: o.PipelineMultiplex,
		MaxFlushDelay: o.MaxFlushDelay, MaxBatch: o.MaxBatch, BatchesInFlight: o.BatchesInFlight,
		RefuseEvictable: o.RefuseEvictable, Logger: o.Logger}
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

// parseUnixURL reads redis+unix://[user[:password]@]/path/of/the.sock.
func parseUnixURL(raw string) (path, user, pass string, err error) {
	rest, ok := strings.CutPrefix(raw, "redis+unix://")
	if !ok {
		return "", "", "", fmt.Errorf("redisstore: address %q: want redis+unix:///path/of/the.sock", redact(raw))
	}
	if at := strings.Index(rest, "@/"); at >= 0 {
		info := rest[:at]
		rest = rest[at+1:]
		u, p, _ := strings.Cut(info, ":")
		if user, err = url.PathUnescape(u); err == nil {
			pass, err = url.PathUnescape(p)
		}
		if err != nil {
			return "", "", "", fmt.Errorf("redisstore: address %q: bad credentials: %v", redact(raw), err)
		}
	}
	if !strings.HasPrefix(rest, "/") || len(rest) < 2 || strings.ContainsAny(rest, "?#") {
		return "", "", "", fmt.Errorf("redisstore: address %q: want redis+unix:///path/of/the.sock", redact(raw))
	}
	return rest, user, pass, nil
}

// openUnix opens a standalone Redis on a Unix socket. The connection is
// not tracked for progress (see NewFromClient) and carries no TLS.
func openUnix(_ context.Context, u string, o store.Options) (limiter.Store, io.Closer, error) {
	path, user, pass, err := parseUnixURL(u)
	if err != nil {
		return nil, nil, err
	}
	opts := options(u, o)
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{path}, Username: user, Password: pass,
		DisableCache: true, DisableRetry: true, ForceSingleClient: true, ClientName: "floodgate",
		ConnWriteTimeout: o.WriteTimeout, Dialer: net.Dialer{Timeout: o.DialTimeout},
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialContext(ctx, "unix", dst)
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: unix socket %s: %w", path, err)
	}
	s := NewFromClient(c, opts)
	return s, closer{s}, nil
}
