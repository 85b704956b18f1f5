package penalty

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
// it has rather than every ban, the bans by the time their strikes are
// forgotten, so that each new ban drops a few forgotten ones, the bans
// by their end, so that a full box drops one that has ended rather than
// refuse a new ban, the counters by the end of their window and by their
// progress toward a ban (their offences over their rule's After), so that
// there are never more of them than the most bans: a new counter past the
// bound drops the one furthest from its ban (neither a flood of new keys
// nor one of offences under a rule of a high After resets the counter of a
// key close to its ban under a rule of a low one, as on the memory
// backend), and the epoch of the version: the server's time when the
// first change was logged, which goes with the data (a
// Redis restarted empty, flushed, or an empty server in its place), so
// that a version counted again from zero is not taken for the one an
// instance has read. Each change is tagged with the server's time: the
// tag of the last one is kept and is part of the version
// ("EPOCH:COUNT:TAG"), and a record of the tag of each of the last
// changeLog+1 counts ("COUNT:TAG", scored by the count: as far back as
// the log can tell the changes since a count), so that after a
// failover to a replica that missed the last changes, other changes that
// make the count again are not taken for the ones an instance read. The
// console's prefix keeps them in one Cluster slot.
const (
	redisBans     = redisconn.Prefix + "penalty:bans"
	redisVersion  = redisconn.Prefix + "penalty:version"
	redisOffences = redisconn.Prefix + "penalty:offences:"
	redisChanges  = redisconn.Prefix + "penalty:changes"
	redisTrimmed  = redisconn.Prefix + "penalty:changes:trimmed"
	redisForget   = redisconn.Prefix + "penalty:forget"
	redisCounters = redisconn.Prefix + "penalty:counters"
	redisCounts   = redisconn.Prefix + "penalty:counts"
	redisEpoch    = redisconn.Prefix + "penalty:epoch"
	redisTag      = redisconn.Prefix + "penalty:tag"
	redisTags     = redisconn.Prefix + "penalty:changes:tags"
	// redisEnds holds the bans by their end, so that a box full of bans
	// makes room from one that has ended (kept only for its strikes)
	// rather than refuse a key that offends now.
	redisEnds = redisconn.Prefix + "penalty:ends"
	// redisUnseen holds the bans no instance has counted and logged yet
	// ("VERSION:FIELD", scored by the version that made them): the
	// instance that made one takes it out when the answer reaches it in
	// time, else the first instance to read the ban, from the change log
	// (Changes) or with every ban (ReadAll), does, so that each ban is
	// counted once across instances.
	redisUnseen = redisconn.Prefix + "penalty:unseen"
	// redisClaims holds the bans claimed from redisUnseen by their maker
	// ("VERSION:FIELD MAKER"), scored by the version that made them, or by
	// a reader of the bans ("VERSION:FIELD r:READER"), scored by the
	// version it read (the last changeLog versions), so that a claim
	// Redis ran after its caller gave up waiting, sent again, says it was
	// the caller's: a read from the version before it, however old the
	// ban (a read of every ban claims those made before the change log).
	redisClaims = redisconn.Prefix + "penalty:claims"
)

// changeLog is how many changed fields the log keeps: an instance whose
// version is older than the log reads every ban again.
const changeLog = 10000

// logChange is the Lua that records a change of field f (a local) at a
// new version of the bans, tagged with the server's time t (a local, the
// reply of TIME), and trims the log (KEYS[3] the version, KEYS[4] the
// log, KEYS[5] the highest version trimmed, KEYS[7] the version's epoch,
// set here when there is none, KEYS[10] the tag of the last change,
// KEYS[11] the tags by count). Tags recorded at or past the new count are
// of changes a failover lost: they go.
var logChange = redisconn.SetEpoch(7) + strings.ReplaceAll(`
local v = redis.call('INCR', KEYS[3])
local tag = `+redisconn.MicrosOf("t")+`
redis.call('SET', KEYS[10], tag)
redis.call('ZREMRANGEBYSCORE', KEYS[11], v, '+inf')
redis.call('ZADD', KEYS[11], v, v .. ':' .. tag)
redis.call('ZREMRANGEBYSCORE', KEYS[11], '-inf', '(' .. (v - CAP))
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
// change log, its highest trimmed version, the bans by forget time, the
// version's epoch, the counters by the end of their window, the counters
// by their offences, the tag of the last change, the tags by count, the
// bans by their end, the bans no instance counted yet. ARGV:
// the field, after, within, ban, max_ban (ms), growth, the most bans (and
// counters), the counters' prefix. It returns
// {0} (counted), {1, until, strikes, now, version} (banned), or {2} (banned
// already, or the box is full). A new counter first drops the counters
// whose window ended and, past the bound, those furthest from a ban
// (the fewest offences over the rule's After); a ban first drops up to 100 bans whose strikes are forgotten
// and, when the bans are still full, the ban that ended first (its
// strikes forgotten early): only bans in force fill the box. The bans by
// their end are checked against the bans (a ban lifted or made again by
// an instance of an earlier version, which keeps no end), so that a ban
// in force is never the one dropped.
var offendScript = rueidis.NewLuaScript(strings.ReplaceAll(`
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
if n < tonumber(ARGV[2]) then
  if n == 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    local ended = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now)
    for i = 1, #ended, 1000 do
      redis.call('ZREM', KEYS[9], unpack(ended, i, math.min(i + 999, #ended)))
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
    local over = redis.call('ZCARD', KEYS[8]) - tonumber(ARGV[7]) + 1
    if over > 0 then
      for _, g in ipairs(redis.call('ZRANGE', KEYS[9], 0, over - 1)) do
        redis.call('DEL', ARGV[8] .. g)
        redis.call('ZREM', KEYS[8], g)
      end
      redis.call('ZREMRANGEBYRANK', KEYS[9], 0, over - 1)
    end
    redis.call('ZADD', KEYS[8], now + tonumber(ARGV[3]), f)
  end
  redis.call('ZADD', KEYS[9], string.format('%.17g', n / tonumber(ARGV[2])), f)
  return {0}
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[8], f)
redis.call('ZREM', KEYS[9], f)
local gone = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('HDEL', KEYS[2], unpack(gone))
  redis.call('ZREM', KEYS[6], unpack(gone))
  redis.call('ZREM', KEYS[12], unpack(gone))
  if prev and redis.call('HEXISTS', KEYS[2], f) == 0 then prev = nil; strikes = 0 end
end
if not prev and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', KEYS[12], '-inf', now, 'LIMIT', 0, 100)) do
    local val = redis.call('HGET', KEYS[2], g)
    local u = val and tonumber(string.match(val, '^(%d+) '))
    if u and u > now then
      redis.call('ZADD', KEYS[12], u, g)
    else
      redis.call('ZREM', KEYS[12], g)
      if val then
        redis.call('HDEL', KEYS[2], g)
        redis.call('ZREM', KEYS[6], g)
        break
      end
    end
  end
  if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then return {2} end
end
local d, maxd, g = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 1, strikes do
  d = d * g
  if d >= maxd then d = maxd break end
end
if d > maxd then d = maxd end
local untl = now + d
redis.call('HSET', KEYS[2], f, string.format('%d %d %d', untl, strikes + 1, untl + maxd))
redis.call('ZADD', KEYS[6], untl + maxd, f)
redis.call('ZADD', KEYS[12], untl, f)
`+logChange+`
redis.call('ZADD', KEYS[13], v, v .. ':' .. f)
redis.call('ZREMRANGEBYSCORE', KEYS[13], '-inf', '(' .. (v - CAP))
return {1, untl, strikes + 1, now, v}
`, "CAP", strconv.Itoa(changeLog)))

// liftScript ends a ban and forgets its strikes. KEYS: those of
// offendScript (the counter and the counters' sets unused). ARGV: the
// field. It returns {the ban's value or false, the server's time (ms)}.
var liftScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = ARGV[1]
local prev = redis.call('HGET', KEYS[2], f)
redis.call('HDEL', KEYS[2], f)
redis.call('ZREM', KEYS[6], f)
redis.call('ZREM', KEYS[12], f)
` + logChange + `
return {prev, now}
`)

// claimUnseen returns the Lua with which a read of the bans up to
// version v (a local) claims the counting of the bans no instance counted
// (KEYS[unseen], "VERSION:FIELD") made from version from (a bound of
// ZRANGEBYSCORE, in Lua) to v: it takes them out, and records them as
// the claims of the reader named by reader (Lua) in KEYS[claims], at v
// (kept for changeLog versions). The local claimed gets their fields, after
// those of the reader's claims made after version since (a local): a read
// whose answer did not reach the reader (which reads from since again)
// made them, and they are the reader's to count.
func claimUnseen(unseen, claims int, reader, from string) string {
	return strings.NewReplacer("UNSEEN", strconv.Itoa(unseen), "CLAIMS", strconv.Itoa(claims), "READER", reader, "FROM", from,
		"CAP", strconv.Itoa(changeLog)).Replace(`
local claimed = {}
local mine = ' r:' .. READER
for _, c in ipairs(redis.call('ZRANGEBYSCORE', KEYS[CLAIMS], '(' .. since, v)) do
  if string.sub(c, -#mine) == mine then
    claimed[#claimed + 1] = string.match(string.sub(c, 1, -#mine - 1), '^%d+:(.*)$')
  end
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[UNSEEN], FROM, v)) do
  redis.call('ZREM', KEYS[UNSEEN], m)
  redis.call('ZADD', KEYS[CLAIMS], v, m .. mine)
  claimed[#claimed + 1] = string.match(m, '^%d+:(.*)$')
end
redis.call('ZREMRANGEBYSCORE', KEYS[CLAIMS], '-inf', '(' .. (v - CAP))
`)
}

// changesScript reads what changed since version ARGV[1] of epoch
// ARGV[2], made by the change tagged ARGV[3]. KEYS: the version, the
// change log, its highest trimmed version, the bans, the version's epoch,
// the tag of the last change, the tags by count, the bans no instance
// counted yet, the claims. ARGV[4] names the reader. It returns {version,
// 1, epoch, now, tag} when the log cannot tell every change since that
// version, else {version, 0, epoch, now, tag, claimed, field, value or
// false, ...}, now the server's time (ms) and claimed the fields of the
// bans made since that version that no instance had counted, which it
// takes out of KEYS[8] and records as the reader's in KEYS[9] (the last
// changeLog versions), and those of them it claimed before: a read whose
// answer did not reach the reader in time, which reads from the same
// version again. The caller counts them. The log cannot tell when it does not
// reach back that far, when the epoch is another (a Redis emptied, whose
// version may have gone back and past the one asked for since), when the
// version went back, when the change that made the count asked for is
// not the one recorded at it (a failover that lost the last changes, the
// count then made again by others; or no tag is recorded at it: a change
// of an earlier version, or trimmed), and when the log holds fewer
// changes than the version moved: a change made without it (an instance
// of an earlier version during a rolling upgrade), or a field changed
// twice since (its entry moved to the later version), which a full read
// covers too.
var changesScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local e = redis.call('GET', KEYS[5]) or ''
local tag = redis.call('GET', KEYS[6]) or ''
local since = tonumber(ARGV[1])
local trimmed = tonumber(redis.call('GET', KEYS[3]) or '0')
if e ~= ARGV[2] or not since or since > v or trimmed > since then return {v, 1, e, now, tag} end
if since == v then
  if tag ~= ARGV[3] then return {v, 1, e, now, tag} end
  return {v, 0, e, now, tag, {}}
end
if since > 0 then
  local at = redis.call('ZRANGEBYSCORE', KEYS[7], since, since)
  if #at ~= 1 or string.match(at[1], '^%d+:(%d+)$') ~= ARGV[3] then return {v, 1, e, now, tag} end
end
if redis.call('ZCOUNT', KEYS[2], '(' .. ARGV[1], v) < v - since then return {v, 1, e, now, tag} end
` + claimUnseen(8, 9, "ARGV[4]", "'(' .. since") + `
local out = {v, 0, e, now, tag, claimed}
for _, f in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf')) do
  out[#out + 1] = f
  out[#out + 1] = redis.call('HGET', KEYS[4], f)
end
return out
`)

// readAllScript reads the bans' version (KEYS: its epoch, its count, the
// tag of its last change) for a read of every ban, and claims the
// counting of every ban no instance counted made up to it (KEYS[4], as
// changesScript does, into KEYS[5]), so that the bans a full read covers
// are counted too: the reads after it start past them. ARGV: the epoch
// and the count of the version the reader has (its claims made after it
// are its to count: a read whose answer did not reach it), the reader. It
// returns {{epoch, count, tag}, claimed}.
var readAllScript = `
local e = redis.call('GET', KEYS[1]) or ''
local c = redis.call('GET', KEYS[2]) or ''
local tag = redis.call('GET', KEYS[3]) or ''
local v = tonumber(c) or 0
local since = '0'
if e == ARGV[1] and tonumber(ARGV[2]) then since = ARGV[2] end
` + claimUnseen(4, 5, "ARGV[3]", "'-inf'") + `
return {{e, c, tag}, claimed}
`

// claimScript claims the counting of bans their maker ARGV[1] made: for
// each pair of ARGV after it, "VERSION:FIELD" and VERSION, it takes the
// ban out of the bans no instance counted (KEYS[1]) and records it as
// claimed by the maker in KEYS[2], at the ban's version, trimming the
// claims older than the last changeLog versions. It returns, for each, 1
// when the ban is the maker's to count: it took it now, or a claim of the
// maker's sent before took it (the caller gave up waiting for its
// answer); 0 when an instance that read the ban took it first. The claims
// of many bans go in one call: those a stall left unanswered, sent again
// together (Late).
var claimScript = rueidis.NewLuaScript(strings.ReplaceAll(`
local out = {}
local top = 0
for i = 2, #ARGV, 2 do
  local m, v = ARGV[i], tonumber(ARGV[i + 1])
  local mine = m .. ' ' .. ARGV[1]
  if redis.call('ZREM', KEYS[1], m) == 1 then
    redis.call('ZADD', KEYS[2], v, mine)
    out[#out + 1] = 1
  elseif redis.call('ZSCORE', KEYS[2], mine) then
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
  if v > top then top = v end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (top - CAP))
return out
`, "CAP", strconv.Itoa(changeLog)))

// claimBatch bounds the claims one call of claimScript sends, so that
// the claims a long stall left unanswered (changeLog at most) do not hold
// Redis for long: they go in at most changeLog/claimBatch calls.
const claimBatch = 1000

// dropScript drops the bans of fields ARGV whose strikes are forgotten,
// or whose value is not a ban, as the server's clock and the bans are
// now: a field banned again since it was read is kept. KEYS: the bans, the
// bans by forget time, the bans by their end. It returns how many it
// dropped.
var dropScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for _, f in ipairs(ARGV) do
  local val = redis.call('HGET', KEYS[1], f)
  if val then
    local fg = string.match(val, '^%d+ %d+ (%d+)$')
    if not fg or tonumber(fg) < now then
      redis.call('HDEL', KEYS[1], f)
      redis.call('ZREM', KEYS[2], f)
      redis.call('ZREM', KEYS[3], f)
      n = n + 1
    end
  end
end
return n
`)

// timeScript returns the server's time (ms). KEYS: the bans, so that it
// runs where they are (their Cluster slot's primary).
const timeScript = `
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// dropBatch is how many fields one call of dropScript looks at, so that a
// full read finding many forgotten bans does not hold Redis for long.
const dropBatch = 1000

// Redis keeps offences and bans in Redis, shared by every instance. The
// bans are made on the server's clock; it returns their ends on the local
// clock (the Box's), placed by what its calls have learnt of the server's
// clock (observe), so that an instance whose clock is not the server's
// still holds a ban for its length, and an answer this process reads late
// does not hold a ban longer here than on the other instances.
type Redis struct {
	c     rueidis.Client
	max   int
	clock func() time.Time // the local clock

	mu    sync.Mutex // guards ref, refMs and moved
	ref   time.Time  // a local instant; zero until a call was answered
	refMs int64      // the server's time (ms) at ref, as far as the calls tell
	moved bool       // a call moved ref by more than replace since Replace

	id      string      // names this process's claims (claimScript)
	claimMu sync.Mutex  // guards pending
	pending []lateClaim // bans made whose claim got no answer, oldest first
}

// lateClaim is a ban this process made whose claim (claimScript) got no
// answer in time: Redis may have run it, so it is sent again (Late).
type lateClaim struct {
	member string // "VERSION:FIELD"
	v      int64
	ban    Ban
}

// NewRedis keeps the penalty box in the Redis c talks to, with at most
// max bans and as many offence counters (0: DefaultMaxBans).
func NewRedis(c rueidis.Client, max int) *Redis {
	if max <= 0 {
		max = DefaultMaxBans
	}
	return &Redis{c: c, max: max, clock: time.Now, id: rand.Text()}
}

// useClock makes now the local clock (a Box's).
func (b *Redis) useClock(now func() time.Time) { b.clock = now }

// local returns the instant on the local clock of a server's instant
// (ms), given the server's time (ms) when the local clock read at.
func local(ms, serverNow int64, at time.Time) time.Time {
	return at.Add(time.Duration(ms-serverNow) * time.Millisecond)
}

// observe learns from a call sent at sent and answered at got (on the
// local clock), in which the server's clock read now (ms), and returns
// where the server's instants are on the local clock: the server's time
// (ms) at a local instant. The server read its clock between sent and
// got, so the place kept is moved only when it would put that reading
// outside them, to the nearer end: an answer read late (a loaded machine,
// a slow network) or a call Redis ran late (a server stalled) leaves it,
// and each answer read sooner than the ones before brings it closer.
// Every instance then places a ban's end within its quickest call of the
// moment the server's clock says, and a server whose clock steps is
// followed at its next answer.
//
// A call that moves the place by more than replace (the first answer was
// read late, or the server's clock stepped) makes Replace say so: the
// bans read before it were placed that far off.
func (b *Redis) observe(sent, got time.Time, now int64) (int64, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ref.IsZero() {
		b.ref, b.refMs = got, now
	} else if at := local(now, b.refMs, b.ref); at.Before(sent) {
		b.moved = b.moved || sent.Sub(at) > replace
		b.ref, b.refMs = sent, now
	} else if at.After(got) {
		b.moved = b.moved || at.Sub(got) > replace
		b.ref, b.refMs = got, now
	}
	return b.refMs, b.ref
}

// replace is how far a call may move where the server's instants are on
// the local clock before the bans read until then are placed again.
const replace = 100 * time.Millisecond

// Replace says whether a call moved where the server's instants are on
// the local clock by more than replace since the last time it said so:
// the bans read before then end that far off here, and are to be read
// again (Bans) to end when the server's clock says.
func (b *Redis) Replace() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.moved
	b.moved = false
	return m
}

func field(rule, key string) string { return rule + "|" + key }

// Offend counts an offence of key against r, and bans it at the After-th.
func (b *Redis) Offend(ctx context.Context, r *config.Ban, key string) (*Ban, error) {
	f := field(r.Name, key)
	ms := func(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }
	sent := b.clock()
	res, err := offendScript.Exec(ctx, b.c,
		[]string{redisOffences + f, redisBans, redisVersion, redisChanges, redisTrimmed, redisForget, redisEpoch, redisCounters, redisCounts,
			redisTag, redisTags, redisEnds, redisUnseen},
		[]string{f, strconv.FormatInt(r.After, 10), ms(r.Within), ms(r.Ban), ms(r.MaxBan), strconv.FormatInt(r.Growth, 10),
			strconv.Itoa(b.max), redisOffences}).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("penalty: redis: %w", err)
	}
	if len(res) < 5 || res[0] != 1 {
		return nil, nil
	}
	refMs, ref := b.observe(sent, b.clock(), res[3])
	ban := &Ban{Rule: r.Name, Key: key, Kind: r.Key, Until: local(res[1], refMs, ref), Strikes: int(res[2]),
		end: res[1]}
	// The ban is this process's to count unless an instance that read it
	// from the change log since claimed it. A claim that got no answer is
	// sent again at the next poll (Late): Redis may have run it.
	c := lateClaim{strconv.FormatInt(res[4], 10) + ":" + f, res[4], *ban}
	n, err := b.claim(ctx, []lateClaim{c})
	if err != nil {
		b.claimMu.Lock()
		if len(b.pending) >= changeLog {
			b.pending = b.pending[1:]
		}
		b.pending = append(b.pending, c)
		b.claimMu.Unlock()
	}
	ban.unseen = err != nil || n[0] == 0
	return ban, nil
}

// claim claims the counting of the bans of claims (at most claimBatch)
// in one call (claimScript); it returns, for each, 1 when it is this
// process's to count.
func (b *Redis) claim(ctx context.Context, claims []lateClaim) ([]int64, error) {
	args := make([]string, 0, 1+2*len(claims))
	args = append(args, b.id)
	for _, c := range claims {
		args = append(args, c.member, strconv.FormatInt(c.v, 10))
	}
	res, err := claimScript.Exec(ctx, b.c, []string{redisUnseen, redisClaims}, args).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("penalty: redis: claim: %w", err)
	}
	if len(res) != len(claims) {
		return nil, fmt.Errorf("penalty: redis: claim: %d answers, want %d", len(res), len(claims))
	}
	return res, nil
}

// Late sends again the claims of bans this process made that got no
// answer in time, claimBatch to a call, and returns the bans they say are
// its to count. The claims still unanswered are kept for the next call.
func (b *Redis) Late(ctx context.Context) []Ban {
	b.claimMu.Lock()
	pending := b.pending
	b.pending = nil
	b.claimMu.Unlock()
	var out []Ban
	for len(pending) > 0 {
		batch := pending[:min(len(pending), claimBatch)]
		res, err := b.claim(ctx, batch)
		if err != nil {
			b.claimMu.Lock()
			b.pending = append(pending[:len(pending):len(pending)], b.pending...)
			if over := len(b.pending) - changeLog; over > 0 {
				b.pending = b.pending[over:]
			}
			b.claimMu.Unlock()
			break
		}
		for i, n := range res {
			if n == 1 {
				ban := batch[i].ban
				ban.unseen, ban.claimed = false, true
				out = append(out, ban)
			}
		}
		pending = pending[len(batch):]
	}
	return out
}

// Bans returns the bans in force and their version; entries whose
// strikes are forgotten are removed, and the version's epoch is set when
// there is none.
func (b *Redis) Bans(ctx context.Context) ([]Ban, string, error) {
	bans, _, v, err := b.all(ctx, nil)
	return bans, v, err
}

// ReadAll reads every ban as Bans does, for a reader that has the bans'
// version since (a Box reading every ban again), and claims the counting
// of the bans no instance counted made up to the version read
// (readAllScript): the reads from the version read start past them, so
// that without the claim no instance would count them. It returns them,
// and the reader's claims made after since (by a read whose answer came
// too late, or by the read of the changes a read of every ban follows),
// those still kept (ended ones included): the reader's to count.
func (b *Redis) ReadAll(ctx context.Context, since string) (bans, claimed []Ban, version string, err error) {
	return b.all(ctx, &since)
}

// all reads every ban and their version, claiming the bans no instance
// counted for a reader that has the version *since (ReadAll) unless since
// is nil (Bans).
func (b *Redis) all(ctx context.Context, since *string) (bans, claimed []Ban, version string, err error) {
	// The epoch is set here when there is none yet, so that the version
	// read now stays the one of the bans' first change.
	stamp := b.c.B().Mget().Key(redisEpoch, redisVersion, redisTag).Build()
	if since != nil {
		parts := strings.SplitN(*since, ":", 3)
		for len(parts) < 2 {
			parts = append(parts, "")
		}
		stamp = b.c.B().Eval().Script(readAllScript).Numkeys(5).Key(redisEpoch, redisVersion, redisTag, redisUnseen, redisClaims).
			Arg(parts[0], parts[1], b.id).Build()
	}
	sent := b.clock()
	res := b.c.DoMulti(ctx, b.c.B().Eval().Script(redisconn.EpochScript).Numkeys(1).Key(redisEpoch).Build(),
		stamp, b.c.B().Hgetall().Key(redisBans).Build(),
		b.c.B().Eval().Script(timeScript).Numkeys(1).Key(redisBans).Build())
	at := b.clock()
	if err := res[0].Error(); err != nil {
		return nil, nil, "", fmt.Errorf("penalty: redis: epoch: %w", err)
	}
	var fields []string
	if since == nil {
		version, err = redisconn.StampOf(res[1])
	} else {
		version, fields, err = readAllOf(res[1])
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("penalty: redis: %w", err)
	}
	m, err := res[2].AsStrMap()
	if err != nil {
		return nil, nil, "", fmt.Errorf("penalty: redis: %w", err)
	}
	now, err := res[3].AsInt64()
	if err != nil {
		return nil, nil, "", fmt.Errorf("penalty: redis: time: %w", err)
	}
	refMs, ref := b.observe(sent, at, now)
	var stale []string
	for f, val := range m {
		rule, key, ok := strings.Cut(f, "|")
		until, strikes, forget, parsed := parseBan(val)
		if !parsed || !ok {
			stale = append(stale, f)
			continue
		}
		if forget < now {
			stale = append(stale, f)
			continue
		}
		if until > now {
			bans = append(bans, Ban{Rule: rule, Key: key, Until: local(until, refMs, ref), Strikes: int(strikes), end: until})
		}
	}
	for _, f := range fields {
		rule, key, ok := strings.Cut(f, "|")
		until, strikes, _, parsed := parseBan(m[f])
		if ok && parsed { // else lifted since, as a read of the changes leaves it
			claimed = append(claimed, Ban{Rule: rule, Key: key, Until: local(until, refMs, ref), Strikes: int(strikes), end: until,
				claimed: true})
		}
	}
	for len(stale) > 0 {
		n := min(len(stale), dropBatch)
		if err := dropScript.Exec(ctx, b.c, []string{redisBans, redisForget, redisEnds}, stale[:n]).Error(); err != nil {
			break // dropped by a later read, or by the next bans made
		}
		stale = stale[n:]
	}
	return bans, claimed, version, nil
}

// readAllOf reads the answer of readAllScript: the bans' version and the
// fields of the bans claimed.
func readAllOf(res rueidis.RedisResult) (version string, fields []string, err error) {
	vs, err := res.ToArray()
	if err != nil {
		return "", nil, fmt.Errorf("read all: %w", err)
	}
	if len(vs) != 2 {
		return "", nil, fmt.Errorf("read all: %d values, want 2", len(vs))
	}
	stamp, err := vs[0].AsStrSlice()
	if err != nil {
		return "", nil, fmt.Errorf("read all: version: %w", err)
	}
	if len(stamp) != 3 {
		return "", nil, fmt.Errorf("read all: version: %d values, want 3", len(stamp))
	}
	if fields, err = vs[1].AsStrSlice(); err != nil {
		return "", nil, fmt.Errorf("read all: claimed: %w", err)
	}
	return redisconn.TaggedStamp(stamp[0], stamp[1], stamp[2]), fields, nil
}

// Version returns the bans' version: its epoch, its count and the tag of
// the change that made the count ("EPOCH:COUNT:TAG").
func (b *Redis) Version(ctx context.Context) (string, error) {
	v, err := redisconn.StampOf(b.c.Do(ctx, b.c.B().Mget().Key(redisEpoch, redisVersion, redisTag).Build()))
	if err != nil {
		return "", fmt.Errorf("penalty: redis: %w", err)
	}
	return v, nil
}

// Lift ends a ban and forgets its strikes, for every instance.
func (b *Redis) Lift(ctx context.Context, rule, key string) (bool, error) {
	res, err := liftScript.Exec(ctx, b.c, []string{redisOffences, redisBans, redisVersion, redisChanges, redisTrimmed, redisForget, redisEpoch,
		redisCounters, redisCounts, redisTag, redisTags, redisEnds},
		[]string{field(rule, key)}).ToArray()
	if err != nil {
		return false, fmt.Errorf("penalty: redis: %w", err)
	}
	if len(res) != 2 {
		return false, fmt.Errorf("penalty: redis: lift: %d values, want 2", len(res))
	}
	now, err := res[1].AsInt64()
	if err != nil {
		return false, fmt.Errorf("penalty: redis: lift: %w", err)
	}
	val, err := res[0].ToString()
	if err != nil { // there was none
		return false, nil
	}
	until, _, _, ok := parseBan(val)
	return ok && until > now, nil
}

// Changes returns what changed since the version since: the bans made
// (ended ones included) and the ones gone (lifted). full says that the log
// cannot tell every change since then (it no longer reaches back that
// far, the epoch is another, or the change since was made by is not the
// one recorded at its count): every ban must be read again (Bans).
func (b *Redis) Changes(ctx context.Context, since string) (made []Ban, gone []id, version string, full bool, err error) {
	parts := strings.SplitN(since, ":", 3)
	if len(parts) != 3 {
		return nil, nil, "", true, nil
	}
	sent := b.clock()
	res, err := changesScript.Exec(ctx, b.c, []string{redisVersion, redisChanges, redisTrimmed, redisBans, redisEpoch, redisTag, redisTags, redisUnseen,
		redisClaims}, []string{parts[1], parts[0], parts[2], b.id}).ToArray()
	at := b.clock()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
	}
	if len(res) < 5 {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %d values, want 5 and more", len(res))
	}
	now, err := res[3].AsInt64()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
	}
	refMs, ref := b.observe(sent, at, now)
	v, err := res[0].AsInt64()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
	}
	e, err := res[2].ToString()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
	}
	tag, err := res[4].ToString()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
	}
	version = redisconn.TaggedStamp(e, strconv.FormatInt(v, 10), tag)
	if f, _ := res[1].AsInt64(); f == 1 {
		return nil, nil, version, true, nil
	}
	if len(res) < 6 || len(res)%2 != 0 {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %d values, want 6 and pairs", len(res))
	}
	fields, err := res[5].AsStrSlice()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("penalty: redis: changes: %w", err)
	}
	claimed := make(map[string]bool, len(fields))
	for _, f := range fields {
		claimed[f] = true
	}
	for i := 6; i+1 < len(res); i += 2 {
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
		made = append(made, Ban{Rule: rule, Key: key, Until: local(until, refMs, ref), Strikes: int(strikes), end: until, claimed: claimed[f]})
	}
	return made, gone, version, false, nil
}

// parseBan reads a ban's value: "UNTIL_MS STRIKES FORGET_MS".
func parseBan(val string) (until, strikes, forget int64, ok bool) {
	_, err := fmt.Sscanf(val, "%d %d %d", &until, &strikes, &forget)
	return until, strikes, forget, err == nil
}
