-- Floodgate: decide a batch of requests, in order, each as if it were sent
-- alone: every hit of one request (all in this slot) is checked, and the
-- hits are charged only if every non-shadow hit allows (all or nothing).
-- Later requests see what earlier ones charged. Times are kept as exact
-- integers in doubles: the server clock is read in microseconds (Unix µs
-- stay below 2^53 until 2255), spans in nanoseconds relative to now, and the
-- rate algorithms' theoretical arrival time as whole seconds + nanoseconds +
-- a fraction rem/Rate.
--
-- ARGV[1] now in µs for tests, or "" for the server's TIME (one instant for
--   the whole batch, as if its requests arrived together)
-- ARGV[2] the number of rules R; then 11 arguments per rule:
--   alg, shadow (0/1), p1 .. p8 (see the algorithms below), q (the leaky
--   queue's delay remainder, else 0)
-- ARGV[3+11R] the requests, packed little-endian (struct): per request
--   op (B: 1 charge, 2 peek, 3 release, 4 lease, 5 reserve, 6 settle,
--   7 a charge whose hits carry flags), number of hits (i4),
--   for a flagged charge one byte per hit: bit 0 a check (decided, never
--   written), bits 1..7 its group (0: none; a group stops the request only
--   when all of its non-shadow hits deny; 127: a group whose verdict the
--   caller works out, which stops nothing here),
--   for a lease 7 more numbers (d): want, want·T ns and rem, back,
--   back·T ns and rem, mark (see lease below),
--   for a reserve one number (d) per hit: the TTL in ms of its settle
--   record, 0 for a hit that is not reserved,
--   then per hit: rule (i4, 1-based), cost (d; a settle: the actual cost),
--   cost·T ns and rem (d, d; rate algorithms), lease (i4: the index in ARGV
--   of the concurrency lease's name, or 0)
-- ARGV[4+11R...] the names of concurrency leases
-- KEYS: one key per hit, two for the sliding log and concurrency (a ZSET and
-- its companion hash), in the order of the requests and their hits. A
-- reserve adds, after its hits' keys, the settle record key of each
-- reserved hit; a settle gives each hit's keys followed by its record key.
-- Reply: one string of little-endian doubles (integers, exact below 2^53):
-- now µs, then per request: charged (0/1; a lease: the units taken), then 6
-- numbers per hit: allowed, remaining, retry ns, reset ns, delay ns, never
-- (cost > capacity). A settle's hit answers found (0/1), the units free,
-- the overrun (at most SPAN: an actual cost near 2^63 is rounded here, and
-- the caller works the exact overrun out from the last two), reset ns, the
-- estimate, the excess charged. A string is cheaper for Redis to send than
-- many integers. The common request (op 1 or 2, one hit, of a rate
-- algorithm or a fixed window) answers in the short form instead: one byte
-- (charged + 2·allowed + 4·never), then remaining, the wait (retry ns when
-- denied, delay ns when allowed) and reset ns: a quarter of the packing
-- and half the bytes.
--
-- Reservations. A reserve is a charge that also writes, for every reserved
-- hit it charged, a settle record <key>:r:<id> (the same hash tag, so the
-- same slot) holding the estimate and where it was charged: the window
-- index of a fixed or sliding window, the period start of a quota, else
-- the instant (µs; a sliding log's entry). The record expires after its
-- TTL, and the reservation then settles at its estimate: nothing is left
-- to do. A settle reads the record (none: the hit answers not found and
-- nothing changes) and replaces it by what it did (the actual cost and
-- the answer, 6 numbers) for SETTLED_MS, so that the same settle sent
-- again is answered alike and changes nothing, and another is not found.
-- Below the estimate it applies the exact inverse of the charge where it
-- was made (as refund.lua does; a window or period that has moved on is
-- left alone), above it charges as much of the
-- excess as fits now, never below zero credit, and answers the rest as the
-- overrun; a concurrency reservation's lease is released.
--
-- A rule's parameters travel once per call, and a request's numbers in one
-- packed argument: parsing arguments is a large part of a small script's
-- cost. A new op is a number, the arguments it reads after its request's
-- header, and a branch below; the hits and the reply stay as they are (the
-- reserve and settle ops were added so).

-- Algorithm ids: the values of Go's floodgate.Algorithm, which
-- TestScriptAlgorithmIDs holds equal to this table. RATE is the rate family.
local ALG = {token_bucket = 1, gcra = 2, leaky_bucket = 3, leaky_queue = 4, fixed_window = 5,
  sliding_log = 6, sliding_window = 7, concurrency = 8, quota = 9}
local RATE = {[ALG.token_bucket] = true, [ALG.gcra] = true, [ALG.leaky_bucket] = true, [ALG.leaky_queue] = true}

local BIG = 9007199254740992 -- 2^53: integers below it are exact
-- SPAN caps the spans (waits, resets, delays) of a reply: the largest
-- double below 2^63, which Go's int64 holds. A span may pass 2^53 ns (104
-- days: a year's window, a long bucket) and is then rounded to a double,
-- never cut short, so that no wait and no key's TTL ends before its time.
local SPAN = 9223372036854774784
local spack, sunpack = struct.pack, struct.unpack

local now_s, now_us
local pad = 0 -- ms added to TTLs: an hour under a test clock, which real time outruns
if ARGV[1] ~= '' then
  pad = 3600000
  now_us = tonumber(ARGV[1])
  now_s = math.floor(now_us / 1000000)
else
  local t = redis.call('TIME')
  now_s = tonumber(t[1])
  now_us = now_s * 1000000 + tonumber(t[2])
end
local sub_ns = (now_us - now_s * 1000000) * 1000 -- ns into the current second

-- UNPACK is the most values a command is given by one unpack: Lua's C stack
-- holds about 8,000, and a longer unpack fails the script ("too many
-- results to unpack"); a batch of 128 requests of 64 hits names 8,192 keys,
-- and a sliding log or a concurrency limit may hold more entries.
local UNPACK = 4000

-- callall runs the command cmd (with key first, unless nil) on the values
-- of list, UNPACK at a time, and returns the replies that are lists joined
-- into one (MGET, HMGET: one value for each of list's).
local function callall(cmd, key, list)
  local out = {}
  for i = 1, #list, UNPACK do
    local j = math.min(i + UNPACK - 1, #list)
    local got
    if key == nil then got = redis.call(cmd, unpack(list, i, j)) else got = redis.call(cmd, key, unpack(list, i, j)) end
    if type(got) == 'table' then
      for k = 1, #got do out[#out+1] = got[k] end
    end
  end
  return out
end

-- A TTL in whole ms, at least 1 and at most 10^13 (317 years), so that it
-- prints as an integer.
local function ceil_ms(ns)
  local ms = math.ceil(ns / 1000000)
  if ms < 1 then ms = 1 elseif ms > 10000000000000 then ms = 10000000000000 end
  return ms + pad
end

-- floor((ns*den + rem) / per), exact while the product stays below 2^53
local function units(ns, rem, den, per)
  if ns < 0 then return 0 end
  local x = ns * den + rem
  local q = x / per
  q = q - q % 1 -- floor(q), exactly, without a call
  if x < BIG then
    if q * per > x then q = q - 1 elseif (q + 1) * per <= x then q = q + 1 end
  end
  return q
end

-- muldiv returns q = floor(a*b/c) and r = a*b - q*c, exactly, for whole
-- numbers a, b in [0, 2^53) and c in [1, 2^53) whose quotient is below 2^53:
-- a product past 2^53 is not exact in a double, so it is then built from
-- b's bits, one at a time, with every sum kept below c.
local function muldiv(a, b, c)
  local x = a * b
  if x < BIG then
    local q = x / c
    q = q - q % 1
    return q, x - q * c
  end
  local qa = a / c
  qa = qa - qa % 1
  local ra = a - qa * c -- a = qa*c + ra, ra < c
  local q, r = 0, 0     -- ra*(b's bits so far) = q*c + r, r < c
  local bits, m = {}, b
  while m > 0 do
    local bit = m % 2
    bits[#bits + 1] = bit
    m = (m - bit) / 2
  end
  for i = #bits, 1, -1 do
    q = q + q
    if r >= c - r then r = r - (c - r); q = q + 1 else r = r + r end
    if bits[i] == 1 then
      if r >= c - ra then r = r - (c - ra); q = q + 1 else r = r + ra end
    end
  end
  return qa * b + q, r
end

-- KEEP as a TTL writes a state string with the TTL its key has: a fixed
-- window written again within the window it was written in, whose key
-- already expires at the window's end. SET ... KEEPTTL costs Redis about
-- half of what SET ... PX does.
local KEEP = -1
-- How long a settled record keeps what its settle did (ms), so that the
-- same settle sent again is answered alike: limiter.SettledTTL, held equal
-- by TestSettledTTLInScript.
local SETTLED_MS = 60000

-- A rate algorithm's state is its theoretical arrival time E, the instant
-- its bucket is full again: whole seconds s, nanoseconds n and a fraction
-- rem/Rate. Every reader takes the first two only as (s - now)·10^9 + n,
-- so one instant has many spellings: s one second later and n 10^9 lower
-- read the same. A state written here spells E with s set to the second at
-- which its key expires (its deadline; n is then below zero, which no
-- other spelling has), so that the next write knows the key's TTL without
-- asking Redis: while the deadline is at least two seconds past the new E,
-- it writes with KEEPTTL (the command costs Redis 0.15 µs, SET ... PX 0.4);
-- else it sets the deadline LEAD seconds past E's second. A key so lives at
-- most LEAD seconds past the moment its bucket is full again, and a key
-- charged steadily gets a new TTL once every second or two instead of on
-- every charge. A state spelt with n in [0, 10^9) (written before, or by a
-- refund, which moves E back) reads the same and gets a TTL on its next
-- write.
local LEAD = 3

-- next_state returns the state string of the arrival time now + nx_n ns +
-- nx_r/Rate, written over a state whose first two numbers are d and dn
-- (nil when there is none), and its TTL (or KEEP).
local function next_state(d, dn, nx_n, nx_r)
  local total = sub_ns + nx_n
  local secs = total / 1000000000
  secs = secs - secs % 1
  local es = now_s + secs
  local en = total - secs * 1000000000
  if dn ~= nil and dn < 0 and es <= d - 2 then
    return spack('<ddd', d, en - (d - es) * 1000000000, nx_r), KEEP
  end
  d = es + LEAD
  return spack('<ddd', d, en - LEAD * 1000000000, nx_r), ceil_ms((d * 1000000 - now_us) * 1000)
end

-- rate_state is next_state written over the state string v.
local function rate_state(v, nx_n, nx_r)
  if #v == 24 then
    local d, dn = sunpack('<dd', v)
    return next_state(d, dn, nx_n, nx_r)
  end
  return next_state(nil, nil, nx_n, nx_r)
end

-- The common cases, one hit of a rate algorithm or of a fixed window, take
-- a straight path that skips the general machinery below (its tables and
-- closures). They decide exactly as rate() and fixed() do; the tests hold
-- both paths to package algo's decisions. Given the key's state string v,
-- each returns its answer in the short form (see the reply above) and,
-- when it charged, the new state and its TTL (or KEEP).
local function fast_rate(op, v, r, cost, nt_n, nt_r)
  local den, per = r[3], r[4]
  local tau_n, tau_r = r[5], r[6]
  local ah_n, ah_r = 0, 0
  local s, n
  if #v == 24 then
    local sr
    s, n, sr = sunpack('<ddd', v)
    ah_n, ah_r = (s - now_s) * 1000000000 + (n - sub_ns), sr
    if ah_r >= den then ah_r = 0 end
    if ah_n < 0 then ah_n, ah_r = 0, 0 end
  end
  if tau_n < ah_n or (tau_n == ah_n and tau_r < ah_r) then ah_n, ah_r = tau_n, tau_r end
  local reset = ah_n
  if ah_r > 0 then reset = ah_n + 1 end
  if reset > SPAN then reset = SPAN end
  -- what is left before this request: tau - ahead
  local ln, lr = tau_n - ah_n, tau_r - ah_r
  if lr < 0 then lr = lr + den; ln = ln - 1 end
  local charged = 0
  if op == 'c' and r[2] then charged = 1 end -- a lone shadow hit never blocks
  if cost > r[9] then
    return spack('<Bddd', charged + 4, units(ln, lr, den, per), 0, reset)
  end
  local nx_n, nx_r = ah_n + nt_n, ah_r + nt_r
  if nx_r >= den then nx_r = nx_r - den; nx_n = nx_n + 1 end
  if tau_n < nx_n or (tau_n == nx_n and tau_r < nx_r) then
    local wn, wr = nx_n - tau_n, nx_r - tau_r
    if wr < 0 then wr = wr + den; wn = wn - 1 end
    if wr > 0 then wn = wn + 1 end
    if wn > SPAN then wn = SPAN end
    return spack('<Bddd', charged, units(ln, lr, den, per), wn, reset)
  end
  local rn, rr = tau_n - nx_n, tau_r - nx_r
  if rr < 0 then rr = rr + den; rn = rn - 1 end
  local nx = nx_n
  if nx_r > 0 then nx = nx_n + 1 end
  if nx > SPAN then nx = SPAN end
  local delay = 0
  local dl_n = r[10]
  if dl_n >= 0 then
    local dl_r = r[11]
    if dl_n < ah_n or (dl_n == ah_n and dl_r < ah_r) then
      local qn, qr = ah_n - dl_n, ah_r - dl_r
      if qr < 0 then qr = qr + den; qn = qn - 1 end
      if qr > 0 then qn = qn + 1 end
      delay = qn
      if delay > SPAN then delay = SPAN end
    end
  end
  local nv, ttl
  if op == 'c' then
    charged = 1
    nv, ttl = next_state(s, n, nx_n, nx_r)
  end
  return spack('<Bddd', charged + 2, units(rn, rr, den, per), delay, nx), nv, ttl
end

-- The same for one hit of a fixed window, as fixed() decides it.
local function fast_fixed(op, v, r, cost)
  local max, w = r[3], r[4]
  local wus = w / 1000
  local e = math.fmod(now_us, wus)
  local idx = (now_us - e) / wus
  local left = w - e * 1000
  local count = 0
  local same = false -- the key holds this window, and expires at its end
  if #v == 16 then
    local si, sc = sunpack('<dd', v)
    if si == idx then count = sc; same = true
    elseif si > idx then
      -- The clock stepped back: keep the newer window, which ends later.
      left = left + (si - idx) * w; idx = si; count = sc
    end
  end
  if left > SPAN then left = SPAN end
  local charged = 0
  if op == 'c' and r[2] then charged = 1 end
  local rem = max - count
  if cost > max or cost > rem then
    if rem < 0 then rem = 0 end
    if cost > max then return spack('<Bddd', charged + 4, rem, 0, left) end
    return spack('<Bddd', charged, rem, left, left)
  end
  count = count + cost
  local nv, ttl
  if op == 'c' then
    charged = 1
    nv, ttl = spack('<dd', idx, count), KEEP
    if not same then ttl = ceil_ms(left) end
  end
  return spack('<Bddd', charged + 2, max - count, 0, left), nv, ttl
end

-- The rules of the call: alg, shadow and p1 .. p8, q (see above).
local nrules = tonumber(ARGV[2])
local function rule(j)
  local a = 2 + (j - 1) * 11
  local r = {tonumber(ARGV[a+1]), ARGV[a+2] == '1'}
  for x = 3, 11 do r[x] = tonumber(ARGV[a+x]) end
  return r
end
local blob = ARGV[3 + nrules * 11]

-- straight decides the common request (op 1 or 2, one hit, of a rate
-- algorithm or a fixed window: the test the client's request.short makes
-- too) on the straight path, given its rule r, its key and the key's state
-- string v (nil: read it here), and returns its answer in the short form
-- and, when it charged, the new state and its TTL (or KEEP). For any other
-- request it returns nil.
local function straight(opn, n, r, key, v, cost, ctn, ctr)
  if n ~= 1 or (opn ~= 1 and opn ~= 2) or r == nil then return nil end
  local rate = RATE[r[1]]
  if not rate and r[1] ~= ALG.fixed_window then return nil end
  local op = 'c'
  if opn == 2 then op = 'p' end
  if v == nil then v = redis.call('GET', key) or '' end
  if rate then return fast_rate(op, v, r, cost, ctn, ctr) end
  return fast_fixed(op, v, r, cost)
end

-- A call of one request of one hit (a lone caller), on the straight path,
-- with nothing else made.
if nrules == 1 and #blob == 37 then
  local opn, n, _, cost, ctn, ctr = sunpack('<Bi4i4ddd', blob)
  local part, nv, ttl = straight(opn, n, rule(1), KEYS[1], nil, cost, ctn, ctr)
  if part ~= nil then
    if nv == nil then
    elseif ttl == KEEP then redis.call('SET', KEYS[1], nv, 'KEEPTTL')
    else redis.call('SET', KEYS[1], nv, 'PX', ttl) end
    return spack('<d', now_us) .. part
  end
end

-- The state strings of the whole batch: read once, written once at the end.
-- A request sees what the requests before it wrote.
local vals = {} -- key -> packed state, '' when there is none
local ttls = {} -- key -> TTL in ms of the pending write
local dirty = {} -- keys to write, in the order first written

-- The tentative writes of the request being decided by the general path, so
-- that a second hit on the same key sees the first (dropped if it denies),
-- in a peek as in a charge; ctent: the units a concurrency key's earlier
-- hits of the request take.
local tent
local ctent

local function get(key)
  if tent ~= nil then
    local t = tent[key]
    if t ~= nil then return t end
  end
  local v = vals[key]
  if v == nil then
    v = redis.call('GET', key)
    if not v then v = '' end
    vals[key] = v
  end
  return v
end

local function put(key, v, ttl)
  local was = ttls[key]
  if was == nil then dirty[#dirty+1] = key
  elseif ttl == KEEP then ttl = was end -- the TTL of a write still pending
  vals[key] = v
  ttls[key] = ttl
end

local out = {struct.pack('<d', now_us)} -- the reply's parts, joined at the end

-- The general machinery: the rate algorithms' general form, the other
-- algorithms, requests of several hits, releases and leases. It is made
-- only when a call needs it, so that the common call (requests of one hit
-- of a rate algorithm or a fixed window) does not pay for its closures.
local G
local function general()
  local function fmt(x) return string.format('%.0f', x) end

  local function add(an, ar, bn, br, den)
    local n, r = an + bn, ar + br
    if r >= den then r = r - den; n = n + 1 end
    return n, r
  end

  local function sub(an, ar, bn, br, den)
    local n = an - bn
    if ar < br then ar = ar + den; n = n - 1 end
    return n, ar - br
  end

  local function less(an, ar, bn, br)
    return an < bn or (an == bn and ar < br)
  end

  local function ceiln(n, r)
    if r > 0 then return n + 1 end
    return n
  end

  -- The lease op, for one hit of a rate algorithm or a fixed window: give
  -- back `back` units that a lease took at the instant `mark` (µs; a fixed
  -- window only takes them back within that window), then take `want` units
  -- if the key has them, else `cost` (the request alone), else nothing.
  -- Appends the units taken and the decision for `cost` as a charge of the
  -- units taken gives it. want·T and back·T come as ns and rem.
  local function lease(key, r, cost, ctn, ctr, want, wtn, wtr, back, btn, btr, mark)
    if RATE[r[1]] then
      local den, per = r[3], r[4]
      local tau_n, tau_r = r[5], r[6]
      local ah_n, ah_r = 0, 0
      local v = get(key)
      if #v == 24 then
        local s, n, rr = struct.unpack('<ddd', v)
        ah_n, ah_r = (s - now_s) * 1000000000 + (n - sub_ns), rr
        if ah_r >= den then ah_r = 0 end
        if ah_n < 0 then ah_n, ah_r = 0, 0 end
      end
      if less(tau_n, tau_r, ah_n, ah_r) then ah_n, ah_r = tau_n, tau_r end
      local changed = false
      if back > 0 then
        ah_n, ah_r = sub(ah_n, ah_r, btn, btr, den)
        if ah_n < 0 then ah_n, ah_r = 0, 0 end
        changed = true
      end
      local got, nx_n, nx_r = 0, ah_n, ah_r
      local tn, tr = add(ah_n, ah_r, wtn, wtr, den)
      if want > 0 and not less(tau_n, tau_r, tn, tr) then
        got, nx_n, nx_r = want, tn, tr
      else
        tn, tr = add(ah_n, ah_r, ctn, ctr, den)
        if cost > 0 and not less(tau_n, tau_r, tn, tr) then got, nx_n, nx_r = cost, tn, tr end
      end
      if got > 0 or changed then put(key, rate_state(v, nx_n, nx_r)) end
      if got > 0 then
        local rn, rr = sub(tau_n, tau_r, nx_n, nx_r, den)
        out[#out+1] = struct.pack('<ddddddd',
          got, 1, units(rn, rr, den, per), 0, math.min(ceiln(nx_n, nx_r), SPAN), 0, 0)
      else
        local rn, rr = sub(tau_n, tau_r, ah_n, ah_r, den)
        local wn, wr = sub(tn, tr, tau_n, tau_r, den)
        out[#out+1] = struct.pack('<ddddddd',
          0, 0, units(rn, rr, den, per), math.min(math.max(ceiln(wn, wr), 0), SPAN), math.min(ceiln(ah_n, ah_r), SPAN), 0, 0)
      end
      return
    end
    local max, w = r[3], r[4]
    local wus = w / 1000
    local e = math.fmod(now_us, wus)
    local idx = (now_us - e) / wus
    local left = w - e * 1000
    local count = 0
    local v = get(key)
    if #v == 16 then
      local si, sc = struct.unpack('<dd', v)
      if si == idx then count = sc
      elseif si > idx then left = left + (si - idx) * w; idx = si; count = sc end
    end
    left = math.min(left, SPAN)
    local changed = false
    if back > 0 and (mark - math.fmod(mark, wus)) / wus == idx then
      count = math.max(0, count - back)
      changed = true
    end
    local got = 0
    if want > 0 and want <= max - count then got = want
    elseif cost > 0 and cost <= max - count then got = cost end
    count = count + got
    if got > 0 or changed then put(key, struct.pack('<dd', idx, count), ceil_ms(left)) end
    if got > 0 then
      out[#out+1] = struct.pack('<ddddddd', got, 1, max - count, 0, left, 0, 0)
    else
      out[#out+1] = struct.pack('<ddddddd', 0, 0, math.max(0, max - count), left, left, 0, 0)
    end
  end

  -- The sliding logs' state within one request (reset for each request, as
  -- their writes go straight to Redis).
  local logs

  -- Rate algorithms (token bucket, GCRA, leaky bucket, leaky queue). State:
  -- the TAT as seconds, nanoseconds and rem, packed as three doubles.
  -- p1 den (Rate), p2 per ns, p3/p4 tau ns/rem, p5/p6 cost·T ns/rem,
  -- p7 capacity, p8 queue delay ns (-1: none), q the delay's rem. The hit
  -- brings cost·T (ns, rem); p5/p6 are T's.
  local function rate(key, r, cost, nt_n, nt_r)
    local den, per = r[3], r[4]
    local tau_n, tau_r = r[5], r[6]
    local cap, dl_n = r[9], r[10]
    local ah_n, ah_r = 0, 0
    local v = get(key)
    if #v == 24 then
      local s, n, r = struct.unpack('<ddd', v)
      ah_n = (s - now_s) * 1000000000 + (n - sub_ns)
      ah_r = r
      if ah_r >= den then ah_r = 0 end
      if ah_n < 0 then ah_n, ah_r = 0, 0 end
    end
    if less(tau_n, tau_r, ah_n, ah_r) then ah_n, ah_r = tau_n, tau_r end
    local d = {0, 0, 0, ceiln(ah_n, ah_r), 0, 0}
    if cost > cap then
      local rn, rr = sub(tau_n, tau_r, ah_n, ah_r, den)
      d[2] = units(rn, rr, den, per)
      d[6] = 1
      return d, nil
    end
    local nx_n, nx_r = add(ah_n, ah_r, nt_n, nt_r, den)
    if less(tau_n, tau_r, nx_n, nx_r) then
      local rn, rr = sub(tau_n, tau_r, ah_n, ah_r, den)
      d[2] = units(rn, rr, den, per)
      local wn, wr = sub(nx_n, nx_r, tau_n, tau_r, den)
      d[3] = ceiln(wn, wr)
      return d, nil
    end
    d[1] = 1
    local rn, rr = sub(tau_n, tau_r, nx_n, nx_r, den)
    d[2] = units(rn, rr, den, per)
    d[4] = ceiln(nx_n, nx_r)
    if dl_n >= 0 then
      local dl_r = r[11]
      if less(dl_n, dl_r, ah_n, ah_r) then
        local qn, qr = sub(ah_n, ah_r, dl_n, dl_r, den)
        d[5] = ceiln(qn, qr)
      end
    end
    local val, ttl = rate_state(v, nx_n, nx_r)
    return d, {key, val, ttl}
  end

  -- The other algorithms are made only when a batch needs them, so that the
  -- common rate-only call does not pay for their closures.
  local M
  local function more()
    -- Fixed window: p1 max, p2 window ns. State: index, count (doubles).
    local function fixed(key, r, cost)
      local max, w = r[3], r[4]
      local wus = w / 1000
      local e = math.fmod(now_us, wus)
      local idx = (now_us - e) / wus
      local left = w - e * 1000
      local count = 0
      local v = get(key)
      if #v == 16 then
        local si, sc = struct.unpack('<dd', v)
        if si == idx then count = sc
        elseif si > idx then
          -- The clock stepped back: keep the newer window, which ends later.
          left = left + (si - idx) * w; idx = si; count = sc
        end
      end
      local d = {0, math.max(0, max - count), 0, left, 0, 0}
      if cost > max then d[6] = 1; return d, nil end
      if cost > max - count then d[3] = left; return d, nil end
      count = count + cost
      d[1] = 1
      d[2] = max - count
      return d, {key, struct.pack('<dd', idx, count), ceil_ms(left)}
    end

    -- Sliding window counter: p1 max, p2 window ns. State: index, curr, prev.
    local function counter(key, r, cost)
      local max, w = r[3], r[4]
      local wus = w / 1000
      local e = math.fmod(now_us, wus)
      local idx = (now_us - e) / wus
      local curr, prev = 0, 0
      local ahead = 0 -- µs until the window decided starts (the clock stepped back)
      local v = get(key)
      if #v == 24 then
        local si, sc, sp = struct.unpack('<ddd', v)
        if si >= idx then
          -- The clock stepped back: keep the newer window, decided as at
          -- its start, and count the waits from there.
          if si > idx then ahead = (si - idx) * wus - e; e = 0 end
          idx = si; curr, prev = sc, sp
        elseif si + 1 == idx then prev = sc end
      end
      if curr < 0 then curr = 0 end
      if prev < 0 then prev = 0 end
      -- in µs: pw = prev·(W−e) = pq·W + pr (pr < W); weighted = ⌈pw/W⌉.
      -- pw passes 2^53 with long windows and large counts, so it is kept
      -- as its quotient and remainder (muldiv), exactly, as algo does in
      -- 128 bits.
      local pq, pr = muldiv(prev, wus - e, wus)
      local weighted = pq
      if pr > 0 then weighted = pq + 1 end
      local left = (ahead + wus - e) * 1000
      local d = {0, math.max(0, max - curr - weighted), 0, left, 0, 0}
      if curr > 0 then d[4] = left + w end
      if cost > max then d[6] = 1; return d, nil end
      -- allow iff pw + (curr+n)·W ≤ L·W, that is pw ≤ (L−curr−n)·W
      local b = max - curr - cost
      local ok = b >= 0 and (pq < b or (pq == b and pr == 0))
      if not ok then
        if b >= 0 then
          -- ⌈(pw − b·W)·1000 / prev⌉ = (W−e)·1000 − ⌊b·W·1000 / prev⌋
          d[3] = (ahead + wus - e) * 1000 - muldiv(b, w, prev)
        else
          local q, rm = muldiv(curr - (max - cost), w, curr)
          if rm > 0 then q = q + 1 end
          d[3] = left + q
        end
        return d, nil
      end
      curr = curr + cost
      d[1] = 1
      d[2] = math.max(0, max - curr - weighted)
      d[4] = left + w
      return d, {key, struct.pack('<ddd', idx, curr, prev), ceil_ms(d[4])}
    end

    -- Sliding log: p1 max, p2 window ns. ZSET member = arrival µs (score the
    -- same), companion hash: member -> weight and "sum".
    local function slog(zkey, hkey, r, cost)
      local max, w = r[3], r[4]
      local cut = now_us - w / 1000
      local sum
      local st = logs[zkey]
      if st == nil then
        sum = tonumber(redis.call('HGET', hkey, 'sum') or '0')
        local gone = redis.call('ZRANGEBYSCORE', zkey, '-inf', cut)
        if #gone > 0 then
          local ws = callall('HMGET', hkey, gone)
          for k = 1, #ws do sum = sum - tonumber(ws[k] or '0') end
        end
        st = {sum = sum, gone = gone, add = 0}
        logs[zkey] = st
      end
      sum = st.sum + st.add
      local last = redis.call('ZREVRANGEBYSCORE', zkey, '+inf', '(' .. fmt(cut), 'WITHSCORES', 'LIMIT', 0, 1)
      local newest = nil
      if #last > 0 then newest = tonumber(last[2]) end
      if st.add > 0 then newest = now_us end
      if newest == nil then sum = 0 end
      local d = {0, math.max(0, max - sum), 0, 0, 0, 0}
      if newest ~= nil then d[4] = w - (now_us - newest) * 1000 end
      if cost > max then d[6] = 1; return d, nil end
      if cost > max - sum then
        -- The live entries, oldest first, a page at a time (a member is
        -- its score): the wait ends when enough of them have passed, which
        -- is most often the first.
        local need, acc, from, page = sum + cost - max, 0, cut, 64
        while acc < need do
          local live = redis.call('ZRANGEBYSCORE', zkey, '(' .. fmt(from), '+inf', 'LIMIT', 0, page)
          if #live == 0 then break end
          local ws = redis.call('HMGET', hkey, unpack(live))
          for k = 1, #live do
            acc = acc + tonumber(ws[k] or '0')
            if acc >= need then
              d[3] = w - (now_us - tonumber(live[k])) * 1000
              break
            end
          end
          from, page = tonumber(live[#live]), math.min(2 * page, UNPACK)
        end
        if acc < need and st.add > 0 then d[3] = w end
        return d, nil
      end
      d[1] = 1
      d[2] = max - sum - cost
      d[4] = w
      return d, {zkey, hkey, st, cost, w}
    end

    local function write_log(wr)
      local zkey, hkey, st, cost, w = wr[1], wr[2], wr[3], wr[4], wr[5]
      if not st.cleaned then
        st.cleaned = true
        if #st.gone > 0 then
          callall('ZREM', zkey, st.gone)
          callall('HDEL', hkey, st.gone)
        end
      end
      local m = fmt(now_us)
      redis.call('ZADD', zkey, now_us, m)
      redis.call('HINCRBY', hkey, m, cost)
      st.sum = st.sum + cost
      redis.call('HSET', hkey, 'sum', fmt(st.sum))
      -- The log lives a window past its newest entry, which is later than
      -- now when the clock stepped back.
      local top = redis.call('ZREVRANGE', zkey, 0, 0, 'WITHSCORES')
      local ahead = tonumber(top[2]) - now_us
      if ahead < 0 then ahead = 0 end
      local ms = ceil_ms(w + ahead * 1000)
      redis.call('PEXPIRE', zkey, ms)
      redis.call('PEXPIRE', hkey, ms)
    end

    -- Concurrency: p1 max, p2 lease ttl ns, p3 RetryAfter cap ns. ZSET member
    -- = lease, score = expiry µs; companion hash: lease -> weight and "sum".
    -- Lease "0" is anonymous: it gets a unique member and can only expire.
    local function conc(op, zkey, hkey, r, cost, lease)
      local max, ttl, hint = r[3], r[4], r[5]
      local sum = tonumber(redis.call('HGET', hkey, 'sum') or '0')
      local gone = redis.call('ZRANGEBYSCORE', zkey, '-inf', now_us)
      if #gone > 0 then
        local ws = callall('HMGET', hkey, gone)
        for k = 1, #ws do sum = sum - tonumber(ws[k] or '0') end
        if sum < 0 then sum = 0 end
        callall('ZREM', zkey, gone)
        callall('HDEL', hkey, gone)
        redis.call('HSET', hkey, 'sum', fmt(sum))
      end
      if op == 'r' then
        if lease ~= '0' then
          local wgt = redis.call('HGET', hkey, lease)
          if wgt then
            sum = sum - tonumber(wgt)
            if sum < 0 then sum = 0 end
            redis.call('ZREM', zkey, lease)
            redis.call('HDEL', hkey, lease)
            redis.call('HSET', hkey, 'sum', fmt(sum))
          end
        end
        local d = {1, math.max(0, max - sum), 0, 0, 0, 0}
        local newest = redis.call('ZREVRANGE', zkey, 0, 0, 'WITHSCORES')
        if #newest > 0 then d[4] = (tonumber(newest[2]) - now_us) * 1000 end
        return d, nil
      end
      local held = 0
      if lease ~= '0' then held = tonumber(redis.call('HGET', hkey, lease) or '0') end
      local inflight = sum - held
      if ctent ~= nil and ctent[zkey] ~= nil then inflight = inflight + ctent[zkey] end
      local d = {0, math.max(0, max - inflight), 0, 0, 0, 0}
      local newest = redis.call('ZREVRANGE', zkey, 0, 0, 'WITHSCORES')
      if #newest > 0 then d[4] = (tonumber(newest[2]) - now_us) * 1000 end
      if cost > max then d[6] = 1; return d, nil end
      if cost > max - inflight then
        -- The leases, soonest to expire first, a page at a time: the
        -- wait ends when enough of them have expired.
        local need, acc, wait, from, page = inflight + cost - max, 0, hint, 0, 64
        while acc < need do
          local live = redis.call('ZRANGE', zkey, from, from + page - 1, 'WITHSCORES')
          if #live == 0 then break end
          local names = {}
          for k = 1, #live, 2 do names[#names+1] = live[k] end
          local ws = redis.call('HMGET', hkey, unpack(names))
          for k = 1, #names do
            if names[k] ~= lease or lease == '0' then
              acc = acc + tonumber(ws[k] or '0')
              if acc >= need then
                wait = math.min(wait, (tonumber(live[2*k]) - now_us) * 1000)
                break
              end
            end
          end
          from, page = from + #names, math.min(2 * page, UNPACK)
        end
        d[3] = wait
        return d, nil
      end
      d[1] = 1
      d[2] = max - inflight - cost
      d[4] = ttl
      return d, {zkey, hkey, lease, cost, held, sum, ttl}
    end

    -- done: the named leases this request wrote already (zkey .. ' ' ..
    -- lease), whose units the later hits of the request add to: one
    -- limit and key twice in one reservation holds both hits' units under
    -- the reservation's one lease, and its release frees them all.
    local function write_conc(wr, done)
      local zkey, hkey, lease, cost, held, sum, ttl = unpack(wr)
      if lease == '0' then
        local n = 0
        lease = 'a' .. fmt(now_us) .. '.' .. n
        while redis.call('ZSCORE', zkey, lease) do
          n = n + 1
          lease = 'a' .. fmt(now_us) .. '.' .. n
        end
      end
      redis.call('ZADD', zkey, now_us + ttl / 1000, lease)
      local weight = cost
      local total = tonumber(redis.call('HGET', hkey, 'sum') or '0') + cost
      local id = zkey .. ' ' .. lease
      if done[id] then
        weight = weight + tonumber(redis.call('HGET', hkey, lease) or '0')
      else
        total = total - held -- a lease held before the request is replaced
        done[id] = true
      end
      redis.call('HSET', hkey, lease, weight, 'sum', fmt(total))
      -- The set lives until its last lease expires, which is later than
      -- this one's when the clock stepped back.
      local top = redis.call('ZREVRANGE', zkey, 0, 0, 'WITHSCORES')
      local last = (tonumber(top[2]) - now_us) * 1000
      if last < ttl then last = ttl end
      local ms = ceil_ms(last)
      redis.call('PEXPIRE', zkey, ms)
      redis.call('PEXPIRE', hkey, ms)
    end

    -- Quota: p1 max, p2..p6 period boundaries µs b0 < b1 < ... < b4 computed
    -- in Go around its own clock, p7 start µs of the period that loses the
    -- offset, p8 the offset. The server's clock picks the period [b0,b1),
    -- [b1,b2) or [b2,b3). State: start, count (doubles).
    local function quota(key, r, cost)
      local max = r[3]
      local b = {r[4], r[5], r[6], r[7], r[8]}
      local ostart, off = r[9], r[10]
      local function lim(start)
        if off > 0 and start == ostart then return max - off end
        return max
      end
      local k = 1
      if now_us >= b[3] then k = 3 elseif now_us >= b[2] then k = 2 end
      local st, en = b[k], b[k+1]
      local count = 0
      local v = get(key)
      if #v == 16 then
        local ss, sc = struct.unpack('<dd', v)
        if ss == st then count = sc
        elseif ss > st then
          -- The clock stepped back over a boundary: keep the newer period.
          for j = k + 1, 4 do
            if b[j] == ss then k = j; st, en = b[j], b[j+1]; count = sc end
          end
        end
      end
      local limit = lim(st)
      local left = (en - now_us) * 1000
      if left < 0 then left = 0 end
      local d = {0, math.max(0, limit - count), 0, left, 0, 0}
      if cost > max then d[6] = 1; return d, nil end
      if cost > limit - count then
        local j = k + 1
        while j < 5 and cost > lim(b[j]) do j = j + 1 end
        d[3] = (b[j] - now_us) * 1000
        return d, nil
      end
      count = count + cost
      d[1] = 1
      d[2] = limit - count
      return d, {key, struct.pack('<dd', st, count), ceil_ms(left)}
    end

    return {fixed = fixed, counter = counter, slog = slog, write_log = write_log,
      conc = conc, write_conc = write_conc, quota = quota}
  end

  -- decide runs the general path for one request: its hits are hs[1..n],
  -- each {rule, cost, cost·T ns, rem, lease name}, and its keys start at
  -- KEYS[k]. It appends charged and the hits' values to out and returns the
  -- next key.
  local function decide(op, hs, n, k, ttl, flags)
    local res = {}
    local writes = {}
    local where = {} -- a reserve: where each hit was charged
    local denied = false
    local gseen, gok = {}, {}
    logs = {}
    tent = {}
    ctent = {}
    for h = 1, n do
      local hit = hs[h]
      local r, cost = hit[1], hit[2]
      local check, grp = false, 0
      if flags ~= nil then
        check, grp = flags[h] % 2 == 1, math.floor(flags[h] / 2)
      end
      local alg = r[1]
      local d, wr
      local kind = 's'
      if not RATE[alg] and M == nil then M = more() end
      if RATE[alg] then
        d, wr = rate(KEYS[k], r, cost, hit[3], hit[4]); k = k + 1
      elseif alg == ALG.fixed_window then
        d, wr = M.fixed(KEYS[k], r, cost); k = k + 1
      elseif alg == ALG.sliding_log then
        d, wr = M.slog(KEYS[k], KEYS[k+1], r, cost); k = k + 2; kind = 'l'
      elseif alg == ALG.sliding_window then
        d, wr = M.counter(KEYS[k], r, cost); k = k + 1
      elseif alg == ALG.concurrency then
        d, wr = M.conc(op, KEYS[k], KEYS[k+1], r, cost, hit[5]); k = k + 2; kind = 'c'
      elseif alg == ALG.quota then
        d, wr = M.quota(KEYS[k], r, cost); k = k + 1
      else
        return nil, 'ERR floodgate: unknown algorithm ' .. tostring(alg)
      end
      res[h] = d
      -- A cost above the capacity can never pass: the call fails (as
      -- algo's does) and charges nothing, whatever its group or flags.
      if d[6] == 1 then denied = true end
      if not r[2] then
        if grp == 0 then
          if d[1] == 0 then denied = true end
        else
          gseen[grp] = true
          if d[1] == 1 then gok[grp] = true end
        end
      end
      if check then wr = nil end -- looked at, never written
      if wr ~= nil and ttl ~= nil then
        where[h] = now_us
        if kind == 's' and not RATE[alg] then where[h] = struct.unpack('<d', wr[2]) end
      end
      if wr ~= nil and (op == 'c' or op == 'p') then
        if op == 'c' then writes[#writes+1] = {kind, wr} end
        if kind == 's' then tent[wr[1]] = wr[2] end
        if kind == 'l' then wr[3].add = wr[3].add + cost end
        if kind == 'c' then ctent[wr[1]] = (ctent[wr[1]] or 0) + cost end
      end
    end
    tent = nil
    ctent = nil
    for g in pairs(gseen) do
      if g ~= 127 and not gok[g] then denied = true end
    end
    local charged = 0
    if op == 'c' and not denied then
      charged = 1
      local cdone = {}
      for _, w in ipairs(writes) do
        local wr = w[2]
        if w[1] == 's' then
          put(wr[1], wr[2], wr[3])
        elseif w[1] == 'l' then
          M.write_log(wr)
        else
          M.write_conc(wr, cdone)
        end
      end
    end
    if ttl ~= nil then
      -- The settle records of the reserved hits charged.
      for h = 1, n do
        if ttl[h] > 0 then
          local rk = KEYS[k]; k = k + 1
          if charged == 1 and res[h][1] == 1 then
            local est, at = hs[h][2], where[h]
            local v = get(rk)
            if #v == 16 then
              -- The same limit and key twice in one reservation.
              local e0, a0 = struct.unpack('<dd', v)
              est, at = est + e0, a0
            end
            put(rk, struct.pack('<dd', est, at), ttl[h])
          end
        end
      end
    end
    out[#out+1] = struct.pack('<d', charged)
    for h = 1, n do
      local d = res[h]
      for j = 1, 6 do
        if d[j] > SPAN then d[j] = SPAN end
      end
      out[#out+1] = struct.pack('<dddddd', d[1], d[2], d[3], d[4], d[5], d[6])
    end
    return k
  end

  -- The settle op's machinery, made only when a call settles, so that the
  -- other calls do not pay for its closures.
  local function settling()
    -- n·T of a rate algorithm as ns and rem (exact while the products stay
    -- below 2^53, as the rest of this script).
    local function times_t(r, n)
      local den = r[3]
      local x = n * r[8]
      local q = math.floor(x / den)
      if x < BIG then
        if q * den > x then q = q - 1 elseif (q + 1) * den <= x then q = q + 1 end
      end
      return n * r[7] + q, x - q * den
    end

    -- keep writes a state string refunded in place, keeping its TTL.
    local function keep(key, v)
      if ttls[key] == nil then redis.call('SET', key, v, 'KEEPTTL') end
      vals[key] = v
    end

    -- try decides cost on one hit of a unit-counting algorithm whose keys
    -- start at KEYS[k], without writing: the decision, the write and its
    -- kind ('s' a state string, 'l' a sliding log).
    local function try(r, k, cost)
      local alg = r[1]
      if RATE[alg] then
        local tn, tr = r[7], r[8]
        if cost ~= 1 then tn, tr = times_t(r, cost) end
        local d, wr = rate(KEYS[k], r, cost, tn, tr)
        return d, wr, 's'
      end
      if M == nil then M = more() end
      local d, wr
      if alg == ALG.fixed_window then
        d, wr = M.fixed(KEYS[k], r, cost)
      elseif alg == ALG.sliding_window then
        d, wr = M.counter(KEYS[k], r, cost)
      elseif alg == ALG.quota then
        d, wr = M.quota(KEYS[k], r, cost)
      else
        logs = {}
        d, wr = M.slog(KEYS[k], KEYS[k+1], r, cost)
        return d, wr, 'l'
      end
      return d, wr, 's'
    end

    -- give_back undoes n units of a charge made where `at` says (see the
    -- reservations above), as refund.lua does.
    local function give_back(r, k, n, at)
      local alg, key = r[1], KEYS[k]
      if RATE[alg] then
        local v = get(key)
        if #v == 24 then
          local den = r[3]
          local s, ns, rr = struct.unpack('<ddd', v)
          local bn, br = times_t(r, math.min(n, r[9]))
          ns, rr = ns - bn, rr - br
          if rr < 0 then rr = rr + den; ns = ns - 1 end
          local q = math.floor(ns / 1000000000)
          keep(key, struct.pack('<ddd', s + q, ns - q * 1000000000, rr))
        end
      elseif alg == ALG.fixed_window or alg == ALG.quota then
        local v = get(key)
        if #v == 16 then
          local si, sc = struct.unpack('<dd', v)
          if si == at then keep(key, struct.pack('<dd', si, math.max(0, sc - n))) end
        end
      elseif alg == ALG.sliding_window then
        local v = get(key)
        if #v == 24 then
          local si, sc, sp = struct.unpack('<ddd', v)
          if si == at then
            keep(key, struct.pack('<ddd', si, math.max(0, sc - n), sp))
          elseif si == at + 1 then
            keep(key, struct.pack('<ddd', si, sc, math.max(0, sp - n)))
          end
        end
      elseif alg == ALG.sliding_log then
        local hkey = KEYS[k+1]
        local m = fmt(at)
        local wgt = tonumber(redis.call('HGET', hkey, m) or '0')
        if wgt > 0 then
          local take = math.min(wgt, n)
          if wgt - take <= 0 then
            redis.call('ZREM', key, m)
            redis.call('HDEL', hkey, m)
          else
            redis.call('HSET', hkey, m, fmt(wgt - take))
          end
          local sum = tonumber(redis.call('HGET', hkey, 'sum') or '0') - take
          redis.call('HSET', hkey, 'sum', fmt(math.max(0, sum)))
        end
      end
    end

    -- charge_up_to charges as much of n units as the limit admits now (as
    -- algo.Params.ChargeUpTo does) and returns the units charged.
    local function charge_up_to(r, k, n)
      local cap = r[3]
      if RATE[r[1]] then cap = r[9] end
      n = math.min(n, cap)
      for _ = 1, 64 do
        if n < 1 then break end
        local d, wr, kind = try(r, k, n)
        if d[1] == 1 then
          if kind == 's' then put(wr[1], wr[2], wr[3]) else M.write_log(wr) end
          return n
        end
        n = math.min(n - 1, d[2])
      end
      return 0
    end

    -- settle runs a settle request: its hits are hs[1..n], each {rule,
    -- actual cost, _, _, lease name}, and its keys start at KEYS[k], each
    -- hit's keys followed by its settle record. Each hit is settled on its
    -- own. It appends the answers to out and returns the next key.
    local function settle(hs, n, k)
      out[#out+1] = struct.pack('<d', 0)
      for h = 1, n do
        local r, actual, lease = hs[h][1], hs[h][2], hs[h][5]
        local alg = r[1]
        local nk = 1
        if alg == ALG.sliding_log or alg == ALG.concurrency then nk = 2 end
        local rk = KEYS[k + nk]
        local rec = get(rk)
        if #rec == 48 then
          -- Settled already: the same settle sent again (its answer was
          -- lost) is answered as it was; another is not found.
          local a, f0, o0, r0, e0, g0 = struct.unpack('<dddddd', rec)
          if a == actual then
            out[#out+1] = struct.pack('<dddddd', 1, f0, o0, r0, e0, g0)
          else
            out[#out+1] = struct.pack('<dddddd', 0, 0, 0, 0, 0, 0)
          end
        elseif #rec ~= 16 then
          out[#out+1] = struct.pack('<dddddd', 0, 0, 0, 0, 0, 0)
        else
          local est, at = struct.unpack('<dd', rec)
          local over, got, free, d = 0, 0, 0, nil
          if alg == ALG.concurrency then
            if M == nil then M = more() end
            d = M.conc('r', KEYS[k], KEYS[k+1], r, 0, lease)
            free = d[2]
          else
            if actual < est then
              give_back(r, k, est - actual, at)
            elseif actual > est then
              got = charge_up_to(r, k, actual - est)
              over = math.min(actual - est - got, SPAN)
            end
            d = try(r, k, 1)
            free = d[2]
            if d[1] == 1 then free = free + 1 end
          end
          local reset = math.min(d[4], SPAN)
          out[#out+1] = struct.pack('<dddddd', 1, free, over, reset, est, got)
          -- The record becomes what the settle did, for SETTLED_MS.
          put(rk, struct.pack('<dddddd', actual, free, over, reset, est, got), SETTLED_MS)
        end
        k = k + nk + 1
      end
      return k
    end

    return settle
  end

  local S
  local function settle(hs, n, k)
    if S == nil then S = settling() end
    return S(hs, n, k)
  end

  return {decide = decide, lease = lease, settle = settle}
end

local rules = {}
for j = 1, nrules do rules[j] = rule(j) end

-- Read every state string of the batch at once, in one call (the ZSETs and
-- hashes of the sliding log and concurrency read as nil and are not used).
if #KEYS > 1 then
  local got = callall('MGET', nil, KEYS)
  for j = 1, #KEYS do vals[KEYS[j]] = got[j] or '' end
end

local pos, k, nblob = 1, 1, #blob
while pos <= nblob do
  -- The common request, one hit of a charge or a peek of a rate algorithm
  -- or a fixed window (37 bytes), is read in one go and decided on the
  -- straight path; any other is read again below.
  local fast = false
  if pos + 36 <= nblob then
    local opn, n, ri, cost, ctn, ctr, _, nxt = sunpack('<Bi4i4dddi4', blob, pos)
    local key = KEYS[k]
    local part, nv, ttl = straight(opn, n, rules[ri], key, vals[key], cost, ctn, ctr)
    if part ~= nil then
      if nv ~= nil then put(key, nv, ttl) end
      out[#out+1] = part
      k, pos, fast = k + 1, nxt, true
    end
  end
  if not fast then
    local opn, n
    opn, n, pos = sunpack('<Bi4', blob, pos)
    if opn == 4 then -- lease
      local want, wtn, wtr, back, btn, btr, mark, ri, cost, ctn, ctr, li
      want, wtn, wtr, back, btn, btr, mark, pos = struct.unpack('<ddddddd', blob, pos)
      ri, cost, ctn, ctr, li, pos = struct.unpack('<i4dddi4', blob, pos)
      if G == nil then G = general() end
      G.lease(KEYS[k], rules[ri], cost, ctn, ctr, want, wtn, wtr, back, btn, btr, mark); k = k + 1
    else
      local op = 'c'
      if opn == 2 then op = 'p' elseif opn == 3 then op = 'r' elseif opn == 5 then op = 'v'
      elseif opn == 6 then op = 's' end
      local ttl, flags
      if op == 'v' then
        ttl = {}
        for h = 1, n do ttl[h], pos = struct.unpack('<d', blob, pos) end
      end
      if opn == 7 then
        flags = {}
        for h = 1, n do flags[h], pos = struct.unpack('<B', blob, pos) end
      end
      if n > 0 then
        -- The general path.
        local hs = {}
        for h = 1, n do
          local ri, cost, ctn, ctr, li
          ri, cost, ctn, ctr, li, pos = struct.unpack('<i4dddi4', blob, pos)
          local lease = '0'
          if li > 0 then lease = ARGV[li] end
          hs[h] = {rules[ri], cost, ctn, ctr, lease}
        end
        if G == nil then G = general() end
        if op == 's' then
          k = G.settle(hs, n, k)
        else
          local err
          if op == 'v' then op = 'c' end
          k, err = G.decide(op, hs, n, k, ttl, flags)
          if k == nil then return redis.error_reply(err) end
        end
      end
    end
  end
end

local gone = {} -- settled reservations' records, deleted in one call
local rcall = redis.call
for i = 1, #dirty do
  local key = dirty[i]
  local v, ttl = vals[key], ttls[key]
  if v == '' then
    gone[#gone+1] = key
  elseif ttl == KEEP then
    rcall('SET', key, v, 'KEEPTTL')
  else
    rcall('SET', key, v, 'PX', ttl)
  end
end
if #gone > 0 then callall('DEL', nil, gone) end
return table.concat(out)
