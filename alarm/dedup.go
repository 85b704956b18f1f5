package alarm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
)

// Releaser is a Deduper that can give a claim back, so that another
// instance (or this process, started again) fires an alarm that this one
// claimed and could not deliver before it stopped.
type Releaser interface {
	Release(ctx context.Context, id string) error
}

// LocalDedup claims alarms in this process: for a single instance on the
// memory store.
type LocalDedup struct {
	mu    sync.Mutex // guards until
	until map[string]time.Time
	now   func() time.Time
}

// NewLocalDedup returns an empty LocalDedup.
func NewLocalDedup() *LocalDedup {
	return &LocalDedup{until: map[string]time.Time{}, now: time.Now}
}

// Once reports whether id was not claimed before.
func (d *LocalDedup) Once(_ context.Context, id string, until time.Time) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if u, ok := d.until[id]; ok && now.Before(u) {
		return false, nil
	}
	if len(d.until) >= 100_000 {
		for k, u := range d.until {
			if !now.Before(u) {
				delete(d.until, k)
			}
		}
	}
	d.until[id] = until
	return true, nil
}

// Release gives the claim of id back.
func (d *LocalDedup) Release(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.until, id)
	return nil
}

// RedisDedup claims alarms across the instances sharing a Redis: SET NX
// with a TTL to the period's end, the value naming the claimant.
type RedisDedup struct {
	c     rueidis.Client
	token string // this claimant's, so that it gives back only its own claims
}

// NewRedisDedup claims alarms in the Redis c talks to.
func NewRedisDedup(c rueidis.Client) *RedisDedup {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &RedisDedup{c: c, token: hex.EncodeToString(b[:])}
}

// releaseScript deletes a claim only while it is the caller's: one that
// expired and another instance took stays.
var releaseScript = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Once reports whether this instance claimed id first.
func (d *RedisDedup) Once(ctx context.Context, id string, until time.Time) (bool, error) {
	ttl := max(time.Until(until), time.Second) + time.Minute
	err := d.c.Do(ctx, d.c.B().Set().Key(redisconn.Prefix+id).Value(d.token).Nx().Px(ttl).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("alarm: redis: %w", err)
	}
	return true, nil
}

// Release gives this instance's claim of id back.
func (d *RedisDedup) Release(ctx context.Context, id string) error {
	if err := releaseScript.Exec(ctx, d.c, []string{redisconn.Prefix + id}, []string{d.token}).Error(); err != nil {
		return fmt.Errorf("alarm: redis: %w", err)
	}
	return nil
}
