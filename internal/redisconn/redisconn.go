// Package redisconn holds the prefix of the console's keys in Redis and
// opens a plain client to a Redis named by a store URL, for tests and tools
// that read or seed those keys. floodgate serve's console does not use it:
// it reaches Redis through the store's own client (package console), so
// that the store's TLS settings and credentials apply.
package redisconn

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/store/redisstore"
)

// Prefix starts every key of the console. The hash tag keeps them in one
// Cluster slot, so that a script or a transaction may touch several.
const Prefix = "{floodgate}:"

// Open connects to the Redis a store URL names (redis://, rediss://,
// redis+cluster://, redis+sentinel://).
func Open(storeURL string) (rueidis.Client, error) {
	a, err := redisstore.ParseURL(storeURL)
	if err != nil {
		return nil, fmt.Errorf("redisconn: %w", err)
	}
	opt := rueidis.ClientOption{
		InitAddress:  a.Hosts,
		Username:     a.Username,
		Password:     a.Password,
		SelectDB:     a.DB,
		DisableCache: true,
		Dialer:       net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second},
		ClientName:   "floodgate-console",
	}
	if a.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if len(a.Hosts) == 1 {
			cfg.ServerName, _, _ = net.SplitHostPort(a.Hosts[0])
		}
		opt.TLSConfig = cfg
	}
	switch a.Mode {
	case redisstore.Standalone:
		opt.ForceSingleClient = true
	case redisstore.Sentinel:
		opt.Sentinel = rueidis.SentinelOption{MasterSet: a.MasterSet, Dialer: opt.Dialer, TLSConfig: opt.TLSConfig}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redisconn: %w", err)
	}
	return c, nil
}

// Stamp is the version of shared state kept as a count of changes in an
// epoch ("EPOCH:COUNT", COUNT 0 before the first change): the epoch is
// set from the server's clock when the data has none, so that it goes
// with the data, and a count started again from zero on a Redis restarted
// empty is not taken for the one an instance read before.
func Stamp(epoch, count string) string {
	if count == "" {
		count = "0"
	}
	return epoch + ":" + count
}

// StampOf reads the reply to an MGET of an epoch and a count as their
// Stamp, or of an epoch, a count and the tag of the change that made the
// count as their Stamp and ":TAG" (an empty tag when none was set).
func StampOf(res rueidis.RedisResult) (string, error) {
	vs, err := res.ToArray()
	if err != nil {
		return "", fmt.Errorf("redisconn: version: %w", err)
	}
	if len(vs) != 2 && len(vs) != 3 {
		return "", fmt.Errorf("redisconn: version: %d values, want 2 or 3", len(vs))
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		s, err := v.ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return "", fmt.Errorf("redisconn: version: %w", err)
		}
		parts[i] = s
	}
	if len(parts) == 3 {
		return TaggedStamp(parts[0], parts[1], parts[2]), nil
	}
	return Stamp(parts[0], parts[1]), nil
}

// TaggedStamp is the Stamp of an epoch and a count with the tag of the
// change that made the count ("EPOCH:COUNT:TAG", TAG "" before the
// first): after a failover that lost the last changes, other changes that
// make the count again carry other tags.
func TaggedStamp(epoch, count, tag string) string {
	return Stamp(epoch, count) + ":" + tag
}

// SetEpoch returns the Lua that sets the epoch KEYS[key] (1-based) to the
// server's time in microseconds when there is none: the start of a
// script that counts a change, so that the count and its epoch are made
// together.
func SetEpoch(key int) string {
	return fmt.Sprintf(`
if redis.call('EXISTS', KEYS[%d]) == 0 then
	local t = redis.call('TIME')
	redis.call('SET', KEYS[%d], %s)
end
`, key, key, MicrosOf("t"))
}

// MicrosOf is the Lua expression of the server's time in microseconds, as
// a string, from t, a local holding the reply of TIME: what epochs and
// the tags of changes are made of.
func MicrosOf(t string) string {
	return t + "[1] .. string.format('%06d', tonumber(" + t + "[2]))"
}

// EpochScript sets the epoch KEYS[1] when there is none; a reader sends it
// before reading a Stamp and its data, so that the Stamp read is the one of
// that data.
var EpochScript = SetEpoch(1) + "return 1\n"
