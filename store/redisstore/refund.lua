-- Floodgate: give back what apply.lua charged for some hits of one request
-- (Redis Cluster, when a later slot denied; a refund of a request that
-- did not go ahead, whose window, log or quota hit names the mark of its
-- charge, limiter.Hit.Mark). Only exact inverses are
-- applied, and only to the state the charge wrote: a window or period that
-- has moved on since is left alone.
--
-- ARGV[1] mark: the now (µs) that apply.lua returned for the charge
-- ARGV[2] number of hits; then 12 arguments per hit as for apply.lua.
-- ARGV[3+12n] (optional) the number of settle records the charge (a
-- reserve) wrote, to delete: their keys follow the hits' keys in KEYS.
-- Algorithm ids: the values of Go's floodgate.Algorithm, which
-- TestScriptAlgorithmIDs holds equal to this table. RATE is the rate family.
local ALG = {token_bucket = 1, gcra = 2, leaky_bucket = 3, leaky_queue = 4, fixed_window = 5,
  sliding_log = 6, sliding_window = 7, concurrency = 8, quota = 9}
local RATE = {[ALG.token_bucket] = true, [ALG.gcra] = true, [ALG.leaky_bucket] = true, [ALG.leaky_queue] = true}
local STRIDE = 12
local mark = tonumber(ARGV[1])
local nhits = tonumber(ARGV[2])
local mark_s = math.floor(mark / 1000000)

local function fmt(x) return string.format('%.0f', x) end

local k = 1
for h = 1, nhits do
  local i = 2 + (h - 1) * STRIDE
  local alg = tonumber(ARGV[i+1])
  local cost = tonumber(ARGV[i+2])
  if RATE[alg] then
    local key = KEYS[k]; k = k + 1
    local v = redis.call('GET', key)
    if v then
      if #v == 24 then
        local den = tonumber(ARGV[i+5])
        local s, n, r = struct.unpack('<ddd', v)
        n, r = n - tonumber(ARGV[i+9]), r - tonumber(ARGV[i+10])
        if r < 0 then r = r + den; n = n - 1 end
        local q = math.floor(n / 1000000000)
        s, n = s + q, n - q * 1000000000
        redis.call('SET', key, struct.pack('<ddd', s, n, r), 'KEEPTTL')
      end
    end
  elseif alg == ALG.fixed_window or alg == ALG.sliding_window then
    local key = KEYS[k]; k = k + 1
    local wus = tonumber(ARGV[i+6]) / 1000
    local idx = (mark - math.fmod(mark, wus)) / wus
    local v = redis.call('GET', key)
    if v and #v == (alg == ALG.fixed_window and 16 or 24) then
      local parts = {struct.unpack(alg == ALG.fixed_window and '<dd' or '<ddd', v)}
      if alg == ALG.fixed_window and parts[1] == idx then
        parts[2] = math.max(0, parts[2] - cost)
      elseif alg == ALG.sliding_window and parts[1] == idx then
        parts[2] = math.max(0, parts[2] - cost)
      elseif alg == ALG.sliding_window and parts[1] == idx + 1 then
        parts[3] = math.max(0, parts[3] - cost)
      end
      if alg == ALG.fixed_window then
        redis.call('SET', key, struct.pack('<dd', parts[1], parts[2]), 'KEEPTTL')
      else
        redis.call('SET', key, struct.pack('<ddd', parts[1], parts[2], parts[3]), 'KEEPTTL')
      end
    end
  elseif alg == ALG.sliding_log then
    local zkey, hkey = KEYS[k], KEYS[k+1]; k = k + 2
    local m = fmt(mark)
    local wgt = tonumber(redis.call('HGET', hkey, m) or '0')
    if wgt > 0 then
      local take = math.min(wgt, cost)
      if wgt - take <= 0 then
        redis.call('ZREM', zkey, m)
        redis.call('HDEL', hkey, m)
      else
        redis.call('HSET', hkey, m, fmt(wgt - take))
      end
      local sum = tonumber(redis.call('HGET', hkey, 'sum') or '0') - take
      redis.call('HSET', hkey, 'sum', fmt(math.max(0, sum)))
    end
  elseif alg == ALG.concurrency then
    local zkey, hkey = KEYS[k], KEYS[k+1]; k = k + 2
    local lease = ARGV[i+4]
    if lease == '0' then
      lease = nil
      local exp = mark + tonumber(ARGV[i+6]) / 1000
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', zkey, exp, exp)) do
        if string.sub(m, 1, 1) == 'a' and string.find(m, 'a' .. fmt(mark) .. '.', 1, true) == 1 then
          lease = m
        end
      end
    end
    if lease then
      local wgt = redis.call('HGET', hkey, lease)
      if wgt then
        redis.call('ZREM', zkey, lease)
        redis.call('HDEL', hkey, lease)
        local sum = tonumber(redis.call('HGET', hkey, 'sum') or '0') - tonumber(wgt)
        redis.call('HSET', hkey, 'sum', fmt(math.max(0, sum)))
      end
    end
  elseif alg == ALG.quota then
    local key = KEYS[k]; k = k + 1
    local b = {tonumber(ARGV[i+6]), tonumber(ARGV[i+7]), tonumber(ARGV[i+8]), tonumber(ARGV[i+9])}
    local st = b[1]
    if mark >= b[3] then st = b[3] elseif mark >= b[2] then st = b[2] end
    local v = redis.call('GET', key)
    if v then
      if #v == 16 then
        local ss, sc = struct.unpack('<dd', v)
        if ss == st then
          redis.call('SET', key, struct.pack('<dd', ss, math.max(0, sc - cost)), 'KEEPTTL')
        end
      end
    end
  end
end
local recs = tonumber(ARGV[3 + nhits * STRIDE] or '0')
for j = k, k + recs - 1 do
  redis.call('DEL', KEYS[j])
end
return 1
