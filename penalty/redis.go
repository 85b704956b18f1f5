package penalty

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
)

// Redis keys of the penalty box: one hash of the bans (field RULE|KEY,
// value "UNTIL_MS STRIKES FORGET_MS"), its version, and one counter per
// offending key that expires with its window. The console's prefix keeps
// them in one Cluster slot.
const (
	redisBans     = redisconn.Prefix + "penalty:bans"
	redisVersion  = redisconn.Prefix + "penalty:version"
	redisOffences = redisconn.Prefix + "penalty:offences:"
)

// offendScript counts an offence and bans the key at the rule's After-th,
// on the server's clock. KEYS: the counter, the bans, the version. ARGV:
// the field, after, within, ban, max_ban (ms), growth, the most bans.
// It returns {0} (counted), {1, until, strikes} (banned), or {2} (banned
// already, or the box is full).
var offendScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prev = redis.call('HGET', KEYS[2], ARGV[1])
local strikes = 0
if prev then
  local u, s, f = string.match(prev, '^(%d+) (%d+) (%d+)$')
  if tonumber(u) > now then return {2} end
  if tonumber(f) > now then strikes = tonumber(s) end
end
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n < tonumber(ARGV[2]) then return {0} end
redis.call('DEL', KEYS[1])
if not prev and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then return {2} end
local d, maxd, g = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 1, strikes do
  d = d * g
  if d >= maxd then d = maxd break end
end
if d > maxd then d = maxd end
local untl = now + d
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d %d %d', untl, strikes + 1, untl + maxd))
redis.call('INCR', KEYS[3])
return {1, untl, strikes + 1}
`)

// Redis keeps offences and bans in Redis, shared by every instance.
type Redis struct {
	c   rueidis.Client
	max int
}

// NewRedis keeps the penalty box in the Redis c talks to, with at most
// max bans (0: DefaultMaxBans).
func NewRedis(c rueidis.Client, max int) *Redis {
	if max <= 0 {
		max = DefaultMaxBans
	}
	return &Redis{c: c, max: max}
}

func field(rule, key string) string { return rule + "|" + key }

// Offend counts an offence of key against r, and bans it at the After-th.
func (b *Redis) Offend(ctx context.Context, r *config.Ban, key string) (*Ban, error) {
	f := field(r.Name, key)
	ms := func(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }
	res, err := offendScript.Exec(ctx, b.c, []string{redisOffences + f, redisBans, redisVersion},
		[]string{f, strconv.FormatInt(r.After, 10), ms(r.Within), ms(r.Ban), ms(r.MaxBan), strconv.FormatInt(r.Growth, 10),
			strconv.Itoa(b.max)}).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("penalty: redis: %w", err)
	}
	if len(res) < 3 || res[0] != 1 {
		return nil, nil
	}
	return &Ban{Rule: r.Name, Key: key, Kind: r.Key, Until: time.UnixMilli(res[1]), Strikes: int(res[2])}, nil
}

// Bans returns the bans in force, by the local clock; entries whose
// strikes are forgotten are removed.
func (b *Redis) Bans(ctx context.Context) ([]Ban, string, error) {
	res := b.c.DoMulti(ctx, b.c.B().Get().Key(redisVersion).Build(), b.c.B().Hgetall().Key(redisBans).Build())
	v, err := res[0].ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, "", fmt.Errorf("penalty: redis: %w", err)
	}
	m, err := res[1].AsStrMap()
	if err != nil {
		return nil, "", fmt.Errorf("penalty: redis: %w", err)
	}
	now := time.Now()
	var out []Ban
	var stale []string
	for f, val := range m {
		rule, key, ok := strings.Cut(f, "|")
		var until, strikes, forget int64
		if _, err := fmt.Sscanf(val, "%d %d %d", &until, &strikes, &forget); err != nil || !ok {
			stale = append(stale, f)
			continue
		}
		if forget < now.UnixMilli() {
			stale = append(stale, f)
			continue
		}
		if until > now.UnixMilli() {
			out = append(out, Ban{Rule: rule, Key: key, Until: time.UnixMilli(until), Strikes: int(strikes)})
		}
	}
	if len(stale) > 0 {
		_ = b.c.Do(ctx, b.c.B().Hdel().Key(redisBans).Field(stale...).Build()).Error()
	}
	return out, v, nil
}

// Version returns the bans' version.
func (b *Redis) Version(ctx context.Context) (string, error) {
	v, err := redisconn.Version(ctx, b.c, redisVersion)
	if err != nil {
		return "", fmt.Errorf("penalty: redis: %w", err)
	}
	return v, nil
}

// Lift ends a ban and forgets its strikes, for every instance.
func (b *Redis) Lift(ctx context.Context, rule, key string) (bool, error) {
	f := field(rule, key)
	res := b.c.DoMulti(ctx, b.c.B().Hget().Key(redisBans).Field(f).Build(),
		b.c.B().Hdel().Key(redisBans).Field(f).Build(), b.c.B().Incr().Key(redisVersion).Build())
	for _, r := range res[1:] {
		if err := r.Error(); err != nil {
			return false, fmt.Errorf("penalty: redis: %w", err)
		}
	}
	val, err := res[0].ToString()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	var until int64
	fmt.Sscanf(val, "%d", &until)
	return until > time.Now().UnixMilli(), nil
}
