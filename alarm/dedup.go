package alarm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
)

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

// RedisDedup claims alarms across the instances sharing a Redis: SET NX
// with a TTL to the period's end.
type RedisDedup struct {
	c rueidis.Client
}

// NewRedisDedup claims alarms in the Redis c talks to.
func NewRedisDedup(c rueidis.Client) *RedisDedup { return &RedisDedup{c: c} }

// Once reports whether this instance claimed id first.
func (d *RedisDedup) Once(ctx context.Context, id string, until time.Time) (bool, error) {
	ttl := max(time.Until(until), time.Second) + time.Minute
	err := d.c.Do(ctx, d.c.B().Set().Key(redisconn.Prefix+id).Value("1").Nx().Px(ttl).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("alarm: redis: %w", err)
	}
	return true, nil
}
