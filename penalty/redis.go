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
// offending key that expires with its window; beside them a log of the
// fields that changed (a sorted set scored by the version that changed
// them, its oldest trimmed past changeLog entries, the highest version
// trimmed kept), so that an instance reads what changed since the version
// it has rather than every ban, and the bans by the time their strikes
// are forgotten, so that each new ban drops a few forgotten ones. The
// console's prefix keeps them in one Cluster slot.
const (
	redisBans     = redisconn.Prefix + "penalty:bans"
	redisVersion  = redisconn.Prefix + "penalty:version"
	redisOffences = redisconn.Prefix + "penalty:offences:"
	redisChanges  = redisconn.Prefix + "penalty:changes"
	redisTrimmed  = redisconn.Prefix + "penalty:changes:trimmed"
	redisForget   = redisconn.Prefix + "penalty:forget"
)

// changeLog is how many changed fields the log keeps: an instance whose
// version is older than the log reads every ban again.
const changeLog = 10000

// logChange is the Lua that records a change of field f (a local) at a
// new version of the bans and trims the log (KEYS[3] the version,
// KEYS[4] the log, KEYS[5] the highest version trimmed).
var logChange = strings.ReplaceAll(`
local v = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[4], v, f)
local n = redis.call('ZCARD', KEYS[4])
if n > CAP then
  local cut = redis.call('ZRANGE', KEYS[4], n - CAP - 1, n - CAP - 1, 'WITHSCORES')
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, n - CAP - 1)
  redis.call('SET', KEYS[5], cut[2])
end
`, "CAP", strconv.Itoa(changeLog))

// offendScript counts an offence and bans the key at the rule's After-th,
// on the server's clock. KEYS: the counter, the bans, the version, the
// change log, its highest trimmed version, the bans by forget time. ARGV:
// the field, after, within, ban, max_ban (ms), growth, the most bans. It
// returns {0} (counted), {1, until, strikes} (banned), or {2} (banned
// already, or the box is full). A ban first drops up to 100 bans whose
// strikes are forgotten.
var offendScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = ARGV[1]
local prev = redis.call('HGET', KEYS[2], f)
local strikes = 0
if prev then
  local u, s, fg = string.match(prev, '^(%d+) (%d+) (%d+)$')
  if tonumber(u) > now then return {2} end
  if tonumber(fg) > now then strikes = tonumber(s) end
end
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n < tonumber(ARGV[2]) then return {0} end
redis.call('DEL', KEYS[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('HDEL', KEYS[2], unpack(gone))
  redis.call('ZREM', KEYS[6], unpack(gone))
  if prev and redis.call('HEXISTS', KEYS[2], f) == 0 then prev = nil; strikes = 0 end
end
if not prev and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then return {2} end
local d, maxd, g = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 1, strikes do
  d = d * g
  if d >= maxd then d = maxd break end
end
if d > maxd then d = maxd end
local untl = now + d
redis.call('HSET', KEYS[2], f, string.format('%d %d %d', untl, strikes + 1, untl + maxd))
redis.call('ZADD', KEYS[6], untl + maxd, f)
` + logChange + `
return {1, untl, strikes + 1}
`)

// liftScript ends a ban and forgets its strikes. KEYS: unused, the bans,
// the version, the change log, its highest trimmed version, the bans by
// forget time. ARGV: the field. It returns the ban's value, or nil.
var liftScript = rueidis.NewLuaScript(`
local f = ARGV[1]
local prev = redis.call('HGET', KEYS[2], f)
redis.call('HDEL', KEYS[2], f)
redis.call('ZREM', KEYS[6], f)
` + logChange + `
return prev
`)

// changesScript reads what changed since version ARGV[1]. KEYS: the
// version, the change log, its highest trimmed version, the bans. It
// returns {version, 1} when the log cannot tell every change since that
// version, else {version, 0, field, value or false, ...}. The log cannot
// tell when it does not reach back that far, when the version went back
// (a Redis emptied), and when it holds fewer changes than the version
// moved: a change made without it (an instance of an earlier version
// during a rolling upgrade), or a field changed twice since (its entry
// moved to the later version), which a full read covers too.
var changesScript = rueidis.NewLuaScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local since = tonumber(ARGV[1])
local trimmed = tonumber(redis.call('GET', KEYS[3]) or '0')
if since > v or trimmed > since then return {v, 1} end
if redis.call('ZCOUNT', KEYS[2], '(' .. ARGV[1], v) < v - since then return {v, 1} end
local out = {v, 0}
for _, f in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf')) do
  out[#out + 1] = f
  out[#out + 1] = redis.call('HGET', KEYS[4], f)
end
return out
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
	res, err := offendScript.Exec(ctx, b.c, []string{redisOffences + f, redisBans, redisVersion, redisChanges, redisTrimmed, redisForget},
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
		until, strikes, forget, parsed := parseBan(val)
		if !parsed || !ok {
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
		b.c.DoMulti(ctx, b.c.B().Hdel().Key(redisBans).Field(stale...).Build(),
			b.c.B().Zrem().Key(redisForget).Member(stale...).Build())
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
	val, err := liftScript.Exec(ctx, b.c, []string{redisOffences, redisBans, redisVersion, redisChanges, redisTrimmed, redisForget},
		[]string{field(rule, key)}).ToString()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("penalty: redis: %w", err)
	}
	until, _, _, ok := parseBan(val)
	return ok && until > time.Now().UnixMilli(), nil
}

// Changes returns what changed since the version since: the bans made
// (ended ones included) and the ones gone (lifted). full says that the log
// no longer reaches back that far: every ban must be read again (Bans).
func (b *Redis) Changes(ctx context.Context, since string) (made []Ban, gone []id, version string, full bool, err error) {
	if since == "" {
		since = "0"
	}
	res, err := changesScript.Exec(ctx, b.c, []string{redisVersion, redisChanges, redisTrimmed, redisBans}, []string{since}).ToArray()
	if err != nil || len(res) < 2 {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w (%d values)", err, len(res))
	}
	v, err := res[0].AsInt64()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
	}
	version = strconv.FormatInt(v, 10)
	if f, _ := res[1].AsInt64(); f == 1 {
		return nil, nil, version, true, nil
	}
	for i := 2; i+1 < len(res); i += 2 {
		f, err := res[i].ToString()
		if err != nil {
			return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
		}
		rule, key, _ := strings.Cut(f, "|")
		val, err := res[i+1].ToString()
		if err != nil { // no such ban: lifted, or forgotten
			gone = append(gone, id{rule, key})
			continue
		}
		until, strikes, _, ok := parseBan(val)
		if !ok {
			gone = append(gone, id{rule, key})
			continue
		}
		made = append(made, Ban{Rule: rule, Key: key, Until: time.UnixMilli(until), Strikes: int(strikes)})
	}
	return made, gone, version, false, nil
}

// parseBan reads a ban's value: "UNTIL_MS STRIKES FORGET_MS".
func parseBan(val string) (until, strikes, forget int64, ok bool) {
	_, err := fmt.Sscanf(val, "%d %d %d", &until, &strikes, &forget)
	return until, strikes, forget, err == nil
}
