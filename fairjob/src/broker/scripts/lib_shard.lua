-- Shared functions of the tenant-sharded queue, prepended to the scripts that
-- touch shards. A sharded queue's keys, its inbox included, hash to one Redis
-- Cluster slot (the tag is the inbox's name); a tenant's list is
-- `<prefix><encoded tenant>`, where the encoding is the same as
-- fairjob::broker::keys::encode (percent-encoding outside [A-Za-z0-9-._~]).
--
-- Dispatch order is start-time fair queueing (stride scheduling). Every
-- runnable tenant (pending jobs, under its cap) has a *pass* and sits in
-- `ready` (a ZSET scored by pass); a dispatch serves the smallest pass and
-- advances the served tenant's pass by 1 / weight. A tenant that becomes
-- runnable (new, returning, released from its cap) starts at
-- max(its last pass, vt), where vt is the pass of the last tenant served in
-- share order: idle time earns no credit. Tenants under their floor (running <
-- floor) are also in `floorq`, served before anyone else. Ties at one pass go
-- in a fixed order: each entry's member is a 15-digit sequence number taken
-- when the tenant entered the order, followed by the tenant (`rmember` maps
-- tenant -> member), and it keeps that member while it stays in the order. So
-- equal weights are exactly round robin, a tenant that arrives (or returns)
-- joins the back of the round, and a tenant's name never decides. Per tenant, live in Redis, one HASH `policy`: `c:<tenant>` (cap, the
-- running limit; 0 pauses), `w:<tenant>` (weight, default 1), `f:<tenant>`
-- (floor, default 0), `r:<tenant>` (rate: `<limit>/<period µs>`, starts per
-- period, none when unset), `b:<tenant>` (burst: the running limit instead of
-- the cap while no other tenant is in the order), `h:<tenant>` (fair yield's
-- share hold, `<limit>|<until µs>`, see shard_limit); `<tenant>` `*` holds the
-- queue's defaults, `y:grace`, `y:minrun`, `y:cooldown` (ms) and `y:off`
-- the queue's fair-yield settings (see shard_yield.lua).
--
-- A tenant with a rate is judged by GCRA on Redis's clock (burst 0: starts
-- spaced by T = ceil(period / limit) µs; `rstate` holds `t:<tenant>`, its
-- theoretical arrival time). A start the dispatch made late (it comes only
-- with a fetch) is counted from its due time, up to T/2 late (the catch-up
-- credit), so the rate is held and not undershot by the fetches' cadence;
-- the credit never puts more than `limit` starts in a window of `period`:
-- `s:<tenant>` keeps the times of its last H starts (H the largest divisor
-- of limit not above 64, fixed-width 16-digit µs) and a start waits until
-- the H-th latest is H * T old (H divides limit, so `limit` starts always
-- span at least the period). Found at the head of the order with its rate
-- spent, it leaves the order WITHOUT advancing its pass: pass and member are
-- kept in `rstate` (`p:`, `m:`) and it waits in `rwait` (ZSET tenant -> µs
-- when its rate next allows a start) while the others are served. The next
-- dispatch at or after that time puts it back with the same member and pass
-- (a bounded number per call), so it is served first when its rate allows;
-- its pass is raised to vt if the others moved past it, so that the turns it
-- could not take are never made up in a burst (e.g. when its rate is
-- removed after an hour). A tenant waiting for its rate is not in the order,
-- so it does not stop another tenant's burst. `lastpass`
-- (ZSET) keeps a tenant's pass while it is out of the order and ahead of vt;
-- entries at or below vt can never matter and are trimmed. State is
-- O(active tenants).
--
-- Within one script call, settings, running counts and vt are read once and
-- remembered (the call is atomic, so they cannot change under it); a fetch
-- reads the head of the order ahead and a fetch or batched ack keeps the
-- running counts in Lua (shard_win_head, shard_add_running), and a script
-- that dispatches or defers ends with shard_flush, which writes the passes,
-- the counts and vt back: a handful of commands per call, not per job.

-- The state keys, in the order ShardKeys::state() gives them.
local function shard_keys(first, prefix)
  return {
    ready = KEYS[first], rmember = KEYS[first + 1], seq = KEYS[first + 2],
    running = KEYS[first + 3], policy = KEYS[first + 4], tenants = KEYS[first + 5],
    floorq = KEYS[first + 6], lastpass = KEYS[first + 7], vt = KEYS[first + 8],
    ring = KEYS[first + 9], limits = KEYS[first + 10],
    rwait = KEYS[first + 11], rstate = KEYS[first + 12],
    prefix = prefix,
  }
end
local SHARD_NKEYS = 13

local function fj_encode(s)
  return (string.gsub(s, '[^%w%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end

-- Leaves one wake-up token on `key` for an idle worker (one at most: a list
-- of length 1, however many pushes).
local function fj_wake(key)
  redis.call('LPUSH', key, '1')
  redis.call('LTRIM', key, 0, 0)
end

local function fj_num(x)
  return string.format('%.17g', x)
end

-- Per-call memory (one script call is atomic). `policy_whole`: the script
-- never writes `policy`, so a small one may be read whole once (see
-- shard_policy_table); `rwait_any` / `floor_any`: nil unknown, false when
-- `rwait` / `floorq` is known empty; `win`, `win_all`, `pend`: the dispatch
-- order's head read ahead (see shard_win_head).
-- `defer_counts`: running counts change in `counts` alone and are written
-- once at the end of the call (shard_counts_flush; the scripts that set it
-- end with shard_flush); `dirty` names the changed ones. `members`: rmember
-- entries read ahead for the tenants of a batch (shard_prefetch).
local shard_memo = { settings = {}, counts = {}, clock = nil, clock_dirty = false, floor_any = nil,
  policy_whole = false, policy_all = nil, rwait_any = nil, win = nil, win_all = false, pend = nil,
  defer_counts = false, dirty = {}, members = {}, policy_shared = false, policy_default = nil }

-- HMGET, HSET and HDEL of many fields, in parts (Lua's stack bounds
-- unpack); HMGET's replies concatenated.
local function fj_hmget(key, fields)
  local out = {}
  for i = 1, #fields, 1000 do
    local r = redis.call('HMGET', key, unpack(fields, i, math.min(#fields, i + 999)))
    for _, v in ipairs(r) do out[#out + 1] = v end
  end
  return out
end

local function fj_hset(key, pairs_flat)
  for i = 1, #pairs_flat, 1000 do
    redis.call('HSET', key, unpack(pairs_flat, i, math.min(#pairs_flat, i + 999)))
  end
end

local function fj_hdel(key, fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', key, unpack(fields, i, math.min(#fields, i + 999)))
  end
end

-- A policy hash of at most this many fields is read whole once per call by
-- the scripts that never write it (fetch and ack), instead of an HMGET per tenant.
local SHARD_POLICY_WHOLE_MAX = 64

-- Redis's clock in µs, read each time (it moves during a call: a tenant
-- with a high rate may start more than once in one fetch).
local function shard_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The emission interval (µs) of a stored rate `<limit>/<period µs>`; nil
-- for none (or a malformed or zero one).
local function shard_rate_interval(v)
  if not v then return nil end
  local l, per = string.match(v, '^(%d+)/(%d+)$')
  l, per = tonumber(l), tonumber(per)
  if not l or not per or l <= 0 or per <= 0 then return nil end
  local h = 1
  for d = math.min(l, 64), 1, -1 do
    if l % d == 0 then
      h = d
      break
    end
  end
  return math.ceil(per / l), h
end

-- A tenant's settings: cap (nil = none), weight (default 1), floor (default
-- 0), rate (its emission interval in µs, nil = none) and rwin (the
-- starts its window checks), burst (nil = none: the
-- running limit while no other tenant of the queue has pending work, when
-- above the cap).
-- The whole policy hash as a table (field -> value), when the calling script
-- allows it (shard_memo.policy_whole) and it has at most
-- SHARD_POLICY_WHOLE_MAX fields; false otherwise.
local function shard_policy_table(sk)
  local all = shard_memo.policy_all
  if all ~= nil then return all end
  all = false
  if shard_memo.policy_whole and redis.call('HLEN', sk.policy) <= SHARD_POLICY_WHOLE_MAX then
    all = {}
    local kv = redis.call('HGETALL', sk.policy)
    local own = false
    for i = 1, #kv, 2 do
      all[kv[i]] = kv[i + 1]
      -- A tenant's own setting (`c:<tenant>`…), not a default (`c:*`) or
      -- a queue setting (`y:…`).
      local k = kv[i]
      if string.sub(k, 1, 2) ~= 'y:' and string.sub(k, 3) ~= '*' then own = true end
    end
    -- No tenant has settings of its own: all share one (shard_policy_of).
    shard_memo.policy_shared = not own
  end
  shard_memo.policy_all = all
  return all
end

local function shard_policy_of(sk, t)
  local p = shard_memo.settings[t]
  if p then return p end
  local v
  local all = shard_policy_table(sk)
  if all and shard_memo.policy_shared and shard_memo.policy_default then
    shard_memo.settings[t] = shard_memo.policy_default
    return shard_memo.policy_default
  end
  if all then
    -- As HMGET answers: false for a missing field.
    v = { all['c:' .. t] or false, all['w:' .. t] or false, all['f:' .. t] or false,
      all['b:' .. t] or false, all['c:*'] or false, all['w:*'] or false, all['f:*'] or false,
      all['b:*'] or false, all['r:' .. t] or false, all['r:*'] or false, all['h:' .. t] or false }
  else
    v = redis.call('HMGET', sk.policy, 'c:' .. t, 'w:' .. t, 'f:' .. t, 'b:' .. t,
      'c:*', 'w:*', 'f:*', 'b:*', 'r:' .. t, 'r:*', 'h:' .. t)
  end
  local weight = tonumber(v[2] or v[6]) or 1
  if weight <= 0 then weight = 1 end
  local rate, rwin = shard_rate_interval(v[9] or v[10])
  p = { cap = tonumber(v[1] or v[5]), weight = weight, floor = tonumber(v[3] or v[7]) or 0,
    burst = tonumber(v[4] or v[8]), rate = rate, rwin = rwin, hold_raw = v[11] }
  -- Fair yield's share hold `<limit>|<until µs>` (see shard_limit).
  local hl, hu = string.match(v[11] or '', '^(%d+)|(%d+)$')
  if hl and tonumber(hu) > shard_now() then p.hold = tonumber(hl) end
  shard_memo.settings[t] = p
  if all and shard_memo.policy_shared then shard_memo.policy_default = p end
  return p
end

local function shard_running(sk, t)
  local r = shard_memo.counts[t]
  if r == nil then
    r = tonumber(redis.call('HGET', sk.running, t) or '0')
    shard_memo.counts[t] = r
  end
  return r
end

local function shard_add_running(sk, t, by)
  if shard_memo.defer_counts then
    local r = math.max(0, shard_running(sk, t) + by)
    shard_memo.counts[t] = r
    shard_memo.dirty[t] = true
    return r
  end
  local r = redis.call('HINCRBY', sk.running, t, by)
  if r <= 0 then
    redis.call('HDEL', sk.running, t)
    r = 0
  end
  shard_memo.counts[t] = r
  return r
end

-- Writes the deferred running counts (one HSET, one HDEL for those at 0).
local function shard_counts_flush(sk)
  local set, del = {}, {}
  for t in pairs(shard_memo.dirty) do
    local r = shard_memo.counts[t]
    if r > 0 then
      set[#set + 1] = t
      set[#set + 1] = string.format('%d', r)
    else
      del[#del + 1] = t
    end
  end
  if #set > 0 then fj_hset(sk.running, set) end
  if #del > 0 then fj_hdel(sk.running, del) end
  shard_memo.dirty = {}
end

-- Reads ahead, in one HMGET each, the running counts of `ts` (tenants) not
-- known yet, and when `members` is true their rmember entries.
local function shard_prefetch(sk, ts, members)
  local need = {}
  for _, t in ipairs(ts) do
    if shard_memo.counts[t] == nil then need[#need + 1] = t end
  end
  if #need > 0 then
    local v = fj_hmget(sk.running, need)
    for i, t in ipairs(need) do shard_memo.counts[t] = tonumber(v[i] or '0') end
  end
  if members then
    local v = fj_hmget(sk.rmember, ts)
    for i, t in ipairs(ts) do shard_memo.members[t] = v[i] end
  end
end

local function shard_vt(sk)
  if shard_memo.clock == nil then
    shard_memo.clock = tonumber(redis.call('GET', sk.vt) or '0')
  end
  return shard_memo.clock
end

-- Writes the passes of the read-ahead window (shard_win_head) to `ready`
-- and forgets the window.
local function shard_win_flush(sk)
  local pend = shard_memo.pend
  if pend then
    local args = {}
    for m, pass in pairs(pend) do
      args[#args + 1] = fj_num(pass)
      args[#args + 1] = m
    end
    -- XX: a member taken out of the order meanwhile stays out.
    if #args > 0 then redis.call('ZADD', sk.ready, 'XX', unpack(args)) end
  end
  shard_memo.pend = nil
  shard_memo.win = nil
end

-- Writes the order's passes and vt back and trims the passes vt overtook;
-- dispatching scripts end with it.
local function shard_flush(sk)
  shard_win_flush(sk)
  shard_counts_flush(sk)
  if shard_memo.clock_dirty then
    redis.call('SET', sk.vt, fj_num(shard_memo.clock))
    redis.call('ZREMRANGEBYSCORE', sk.lastpass, '-inf', fj_num(shard_memo.clock))
    shard_memo.clock_dirty = false
  end
end

-- Some tenant may wait for its rate (`rwait` not known empty; read once
-- per call, set again when a tenant is parked).
local function shard_rwait_any(sk)
  if shard_memo.rwait_any == nil then
    shard_memo.rwait_any = redis.call('EXISTS', sk.rwait) == 1
  end
  return shard_memo.rwait_any
end

-- `t`'s entry in `rwait` (the µs when its rate allows a start), or false;
-- no command once `rwait` is known empty in this call.
local function shard_rwait_of(sk, t)
  if not shard_rwait_any(sk) then return false end
  return redis.call('ZSCORE', sk.rwait, t)
end

-- `floorq` is known empty in this call (read once).
local function shard_floorq_empty(sk)
  if shard_memo.floor_any == nil then
    shard_memo.floor_any = redis.call('EXISTS', sk.floorq) == 1
  end
  return shard_memo.floor_any == false
end

-- Another tenant than `t` is in the dispatch order (has pending work it may run).
local function shard_others_ready(sk, t)
  local n = redis.call('ZCARD', sk.ready)
  if n == 0 then return false end
  if redis.call('HEXISTS', sk.rmember, t) == 1 then n = n - 1 end
  return n > 0
end

-- `t`'s running limit now: its cap, or its burst (when above the cap) while
-- no other tenant is in the dispatch order; while another is, also at most
-- its share hold (`h:<tenant>`, written by fair yield's decision for a
-- tenant at or above its share while another waits below its own, for a few
-- seconds: stride order counts starts, so a tenant with longer jobs would
-- otherwise be started above its share of slot-time). nil = none.
local function shard_limit(sk, t)
  local p = shard_policy_of(sk, t)
  if p.hold ~= nil and shard_others_ready(sk, t) then
    if p.cap == nil or p.hold < p.cap then return p.hold end
    return p.cap
  end
  if p.cap ~= nil and p.burst ~= nil and p.burst > p.cap and not shard_others_ready(sk, t) then
    return p.burst
  end
  return p.cap
end

-- Pending jobs, under its running limit (a cap of 0 pauses) and not waiting
-- for its rate.
local function shard_runnable(sk, t)
  local cap = shard_limit(sk, t)
  if cap ~= nil and shard_running(sk, t) >= cap then return false end
  if shard_rwait_of(sk, t) then return false end
  return redis.call('LLEN', sk.prefix .. t) > 0
end

-- Takes `t` out of the dispatch order (also the entry `m`, when given: one
-- found in `ready` that `rmember` may not know); returns the pass it had, or nil.
local function shard_unready(sk, t, m)
  local known = redis.call('HGET', sk.rmember, t)
  local floored = shard_policy_of(sk, t).floor > 0
  local pass = nil
  local function drop(member)
    pass = pass or tonumber(redis.call('ZSCORE', sk.ready, member))
    redis.call('ZREM', sk.ready, member)
    if floored then redis.call('ZREM', sk.floorq, member) end
  end
  if m then drop(m) end
  if known and known ~= m then drop(known) end
  if known then redis.call('HDEL', sk.rmember, t) end
  return pass
end

-- Keeps `pass` as `t`'s last pass while it can still matter (ahead of vt).
local function shard_remember(sk, t, pass)
  if pass ~= nil and pass > shard_vt(sk) then
    redis.call('ZADD', sk.lastpass, fj_num(pass), t)
    -- A queue idle for an hour forgets its drained tenants' passes.
    redis.call('EXPIRE', sk.lastpass, 3600)
  else
    redis.call('ZREM', sk.lastpass, t)
  end
end

-- Puts `t` into the order at max(pass, vt), behind the tenants already there.
local function shard_enready(sk, t, pass)
  pass = math.max(pass, shard_vt(sk))
  local m = string.format('%015d', redis.call('INCR', sk.seq)) .. t
  redis.call('ZADD', sk.ready, fj_num(pass), m)
  redis.call('HSET', sk.rmember, t, m)
  local floor = shard_policy_of(sk, t).floor
  if floor > 0 and shard_running(sk, t) < floor then
    redis.call('ZADD', sk.floorq, fj_num(pass), m)
    shard_memo.floor_any = true
  end
end

-- Takes `t` (at the head of the order as member `m` with `pass`) out of the
-- order until `at` (µs), when its rate allows its next start; its pass and
-- member are kept.
local function shard_rate_park(sk, t, m, pass, at)
  redis.call('ZREM', sk.ready, m)
  redis.call('ZREM', sk.floorq, m)
  redis.call('HDEL', sk.rmember, t)
  redis.call('HSET', sk.rstate, 'p:' .. t, fj_num(pass), 'm:' .. t, m)
  redis.call('ZADD', sk.rwait, at, t)
  shard_memo.rwait_any = true
end

-- Brings a tenant waiting for its rate back: into the order with the member
-- and pass it had (at least vt: no burst of turns made up), if it is
-- runnable; its pass remembered otherwise. True when it entered the order.
local function shard_rate_unpark(sk, t)
  redis.call('ZREM', sk.rwait, t)
  local v = redis.call('HMGET', sk.rstate, 'p:' .. t, 'm:' .. t)
  redis.call('HDEL', sk.rstate, 'p:' .. t, 'm:' .. t)
  local pass = math.max(tonumber(v[1] or '0'), shard_vt(sk))
  if not shard_runnable(sk, t) or redis.call('HGET', sk.rmember, t) then
    shard_remember(sk, t, pass)
    return false
  end
  local m = v[2]
  if not m then
    shard_enready(sk, t, pass)
    return true
  end
  redis.call('ZADD', sk.ready, fj_num(pass), m)
  redis.call('HSET', sk.rmember, t, m)
  if shard_running(sk, t) < shard_policy_of(sk, t).floor then
    redis.call('ZADD', sk.floorq, fj_num(pass), m)
    shard_memo.floor_any = true
  end
  return true
end

-- Brings back (at most `max`) tenants whose rate allows a start again.
local function shard_rate_wake(sk, max)
  if not shard_rwait_any(sk) then return end
  local due = redis.call('ZRANGEBYSCORE', sk.rwait, '-inf', shard_now(), 'LIMIT', 0, max)
  for _, t in ipairs(due) do shard_rate_unpark(sk, t) end
end

-- When the window of `t`'s last starts (`h`, as stored) lets it start
-- again (nil: no constraint).
local function shard_rate_window_due(h, p)
  if not h or #h < 16 * p.rwin then return nil end
  return tonumber(string.sub(h, #h - 16 * p.rwin + 1, #h - 16 * p.rwin + 16)) + p.rwin * p.rate
end

-- When `t`'s rate next allows a start (nil: now, or it has no rate). Never
-- more than one period of its current rate away: a state left by a slower
-- rate is cut to one interval (a changed rate applies from the next start).
local function shard_rate_wait(sk, t, p)
  if p.rate == nil then return nil end
  local v = redis.call('HMGET', sk.rstate, 't:' .. t, 's:' .. t)
  local tat, now = tonumber(v[1]), shard_now()
  if tat and tat > now + p.rate then
    tat = now + p.rate
    redis.call('HSET', sk.rstate, 't:' .. t, fj_num(tat))
  end
  local due = shard_rate_window_due(v[2], p)
  if tat and (due == nil or tat > due) then due = tat end
  if due == nil or due <= now then return nil end
  return due
end

-- Counts a start of `t` against its rate; returns how long (µs) until its
-- rate allows the next one and when (nil: it has no rate).
local function shard_rate_count(sk, t, p)
  if p.rate == nil then return nil end
  local now = shard_now()
  local v = redis.call('HMGET', sk.rstate, 't:' .. t, 's:' .. t)
  local tat = tonumber(v[1]) or now
  local credit = math.floor(p.rate / 2)
  if tat < now - credit then tat = now - credit end
  tat = tat + p.rate
  local h = (v[2] or '') .. string.format('%016d', now)
  if #h > 16 * p.rwin then h = string.sub(h, #h - 16 * p.rwin + 1) end
  redis.call('HSET', sk.rstate, 't:' .. t, fj_num(tat), 's:' .. t, h)
  local due = shard_rate_window_due(h, p)
  if due == nil or tat > due then due = tat end
  return due - now, due
end

-- Drops `t`'s rate state once it can no longer hold back a start.
local function shard_rate_forget(sk, t)
  local v = redis.call('HMGET', sk.rstate, 't:' .. t, 's:' .. t)
  if not v[1] and not v[2] then return end
  local p, now = shard_policy_of(sk, t), shard_now()
  if v[1] and (p.rate == nil or tonumber(v[1]) <= now) then
    redis.call('HDEL', sk.rstate, 't:' .. t)
  end
  if v[2] and (p.rate == nil
      or tonumber(string.sub(v[2], -16)) + p.rwin * p.rate <= now) then
    redis.call('HDEL', sk.rstate, 's:' .. t)
  end
end

-- A tenant whose next start is further away than this after a dispatch waits
-- out of the order at once (so spent tenants never pile up at its head); a
-- sooner one stays in and is judged when it reaches the head.
local SHARD_PARK_AFTER_US = 1000

-- Brings `t`'s place in the order up to date with its jobs and settings: in it
-- when runnable (entering at max(last pass, vt)), out of it otherwise, and in
-- `floorq` exactly while under its floor. A tenant waiting for its rate stays
-- out until its time (or until its rate is removed, or changed so that its
-- time is further away than its window of starts allows: then it is judged again at the head of
-- the order). True when `t` entered the order (the caller then wakes an idle
-- worker).
local function shard_consider(sk, t)
  local w = shard_rwait_of(sk, t)
  if w then
    local p = shard_policy_of(sk, t)
    w = tonumber(w)
    if p.rate ~= nil and w > shard_now() and w <= shard_now() + p.rate * p.rwin then return false end
    return shard_rate_unpark(sk, t)
  end
  local m = redis.call('HGET', sk.rmember, t)
  if shard_runnable(sk, t) then
    if not m then
      local last = redis.call('ZSCORE', sk.lastpass, t)
      if last then redis.call('ZREM', sk.lastpass, t) end
      shard_enready(sk, t, tonumber(last or '0'))
      return true
    end
    local floor = shard_policy_of(sk, t).floor
    if floor > 0 and shard_running(sk, t) < floor then
      redis.call('ZADD', sk.floorq, redis.call('ZSCORE', sk.ready, m), m)
      shard_memo.floor_any = true
    elseif floor > 0 or not shard_floorq_empty(sk) then
      redis.call('ZREM', sk.floorq, m)
    end
  elseif m then
    shard_remember(sk, t, shard_unready(sk, t))
  end
  return false
end

-- fairjob 0.1's structures join the fair-share order: tenants of its
-- round-robin ring (a few per call, so a rolling upgrade needs no stop), and
-- its `limits` hash (caps), copied into `policy` once.
local function shard_migrate(sk, max)
  local caps = redis.call('HGETALL', sk.limits)
  for i = 1, #caps, 2 do
    redis.call('HSETNX', sk.policy, 'c:' .. caps[i], caps[i + 1])
  end
  if #caps > 0 then redis.call('DEL', sk.limits) end
  local old = redis.call('ZRANGE', sk.ring, 0, max - 1)
  for _, t in ipairs(old) do
    redis.call('ZREM', sk.ring, t)
    shard_consider(sk, t)
  end
  return #old
end

local function shard_push(sk, t, payload, front)
  if front then
    redis.call('RPUSH', sk.prefix .. t, payload)
  else
    redis.call('LPUSH', sk.prefix .. t, payload)
  end
  redis.call('SADD', sk.tenants, t)
  return shard_consider(sk, t)
end

-- Releases one running job of `t`; true when that put `t` back in the order
-- (the caller then wakes an idle worker).
local function shard_release(sk, t)
  local r = shard_add_running(sk, t, -1)
  -- A tenant without cap, floor, rate or hold is in the order exactly while
  -- it has pending jobs (pushes, dispatches and setting changes keep it so),
  -- and its running count decides nothing: found in the order (read ahead
  -- by shard_prefetch), its release changes nothing else.
  local p = shard_policy_of(sk, t)
  if shard_memo.members[t] and p.cap == nil and p.floor == 0 and p.rate == nil
      and not p.hold_raw then
    return false
  end
  shard_memo.members[t] = nil
  local entered = shard_consider(sk, t)
  if r == 0 and redis.call('LLEN', sk.prefix .. t) == 0 then
    redis.call('SREM', sk.tenants, t)
    -- A rate state in the past can never matter again.
    shard_rate_forget(sk, t)
  end
  return entered
end

-- The tenant of an inbox entry pushed by a producer that knows nothing of
-- shards: its `fair_tenant` field, or the shared shard ('') when it has none or
-- is not JSON (the worker dead-letters malformed entries when it fetches them).
-- Also says whether the entry is a slot waiter released by a freed slot
-- (`fairjob_slot_released`), which goes to the front of its tenant's list.
local function shard_tenant_of(payload)
  local ok, job = pcall(cjson.decode, payload)
  if ok and type(job) == 'table' then
    local front = job['fairjob_slot_released'] == true
    local t = job['fair_tenant']
    if type(t) == 'string' and t ~= '' then return fj_encode(t), front end
    if type(t) == 'number' and t == math.floor(t) then return string.format('%d', t), front end
    return '', front
  end
  return '', false
end

local function shard_drain_inbox(sk, inbox, max)
  for _ = 1, max do
    local e = redis.call('RPOP', inbox)
    if not e then return end
    local t, front = shard_tenant_of(e)
    shard_push(sk, t, e, front)
  end
end

-- The order's key of an entry: its pass, then its member's sequence number
-- (`rank`; members differ in it, see the top of this file).
local function shard_win_before(a, b)
  if a.pass ~= b.pass then return a.pass < b.pass end
  return a.rank < b.rank
end

-- The head of the dispatch order (an entry { m, pass, rank }), read ahead:
-- one ZRANGE reads the first `want` + 1 entries of `ready` (the window), a
-- dispatch that keeps its tenant in the order records the new pass in
-- `pend` and puts the entry back into the window at its place, when that
-- place is known (before the window's last entry, or the window holds all of
-- `ready`); else it leaves the window, which still holds the true first
-- entries of the order. The passes are written with one ZADD when the window
-- runs out (then it is read again) and at the end of the call
-- (shard_flush). Any other change to `ready` first flushes (shard_win_flush).
-- nil when the order is empty.
local function shard_win_head(sk, want)
  local w = shard_memo.win
  if w == nil or #w == 0 then
    shard_win_flush(sk)
    local k = math.max(1, want) + 1
    local r = redis.call('ZRANGE', sk.ready, 0, k - 1, 'WITHSCORES')
    w = {}
    for i = 1, #r, 2 do
      w[#w + 1] = { m = r[i], pass = tonumber(r[i + 1]), rank = tonumber(string.sub(r[i], 1, 15)) }
    end
    shard_memo.win = w
    shard_memo.win_all = #w < k
    shard_memo.pend = {}
    local ts = {}
    for i, e in ipairs(w) do ts[i] = string.sub(e.m, 16) end
    shard_prefetch(sk, ts, false)
  end
  return w[1]
end

-- The head `e` was dispatched and stays in the order at `pass`.
local function shard_win_advance(e, pass)
  local w = shard_memo.win
  table.remove(w, 1)
  shard_memo.pend[e.m] = pass
  e.pass = pass
  local n = #w
  if not shard_memo.win_all and (n == 0 or not shard_win_before(e, w[n])) then return end
  local i = n + 1
  while i > 1 and shard_win_before(e, w[i - 1]) do i = i - 1 end
  table.insert(w, i, e)
end

-- The head `e` leaves the order (at its cap, waiting for its rate, drained):
-- the window without it is still the order's first entries. Nothing for a
-- head served from `floorq` (e nil: the window was written and forgotten).
local function shard_win_drop(e)
  if not e then return end
  table.remove(shard_memo.win, 1)
  shard_memo.pend[e.m] = nil
end

-- The head (window entry `e` or nil, member `m`) leaves the order at its cap
-- or drained; `pass` is kept for when it returns.
local function shard_head_leave(sk, e, t, m, pass)
  shard_win_drop(e)
  shard_unready(sk, t, m)
  shard_remember(sk, t, pass)
end

-- Dispatches the next job: the tenant under its floor with the smallest pass,
-- else the smallest pass of all; its oldest job; its pass advanced by
-- 1 / weight. A tenant found at its cap (lowered at runtime) leaves the order
-- until one of its jobs ends or its cap is raised; one found with its rate
-- spent waits in `rwait`, its pass kept (shard_rate_park). Bounded: never walks all
-- tenants. `want`: how many jobs the call still dispatches (the read-ahead,
-- shard_win_head). The caller counts dispatches per tenant.
local function shard_reserve(sk, want)
  for _ = 1, 32 do
    local top = {}
    local floored = false
    if shard_memo.floor_any ~= false then
      top = redis.call('ZRANGE', sk.floorq, 0, 0, 'WITHSCORES')
      floored = #top > 0
      if not floored then shard_memo.floor_any = false end
    end
    local e = nil
    if floored then
      shard_win_flush(sk)
    else
      e = shard_win_head(sk, want)
      if e == nil then return nil end
      top = { e.m, e.pass }
    end
    local t = string.sub(top[1], 16)
    local pass = tonumber(top[2])
    local p = shard_policy_of(sk, t)
    local limit = shard_limit(sk, t)
    local wait_until = nil
    if limit == nil or shard_running(sk, t) < limit then wait_until = shard_rate_wait(sk, t, p) end
    -- Leaving the order, the head leaves the window (its pass is `pass`,
    -- also when only the window knows it).
    if limit ~= nil and shard_running(sk, t) >= limit then
      shard_head_leave(sk, e, t, top[1], pass)
    elseif wait_until then
      shard_win_drop(e)
      shard_rate_park(sk, t, top[1], pass, wait_until)
    else
      local job = redis.call('RPOP', sk.prefix .. t)
      if not job then
        shard_head_leave(sk, e, t, top[1], pass)
      else
        local running = shard_add_running(sk, t, 1)
        local wait, due = shard_rate_count(sk, t, p)
        if not floored and pass > shard_vt(sk) then
          shard_memo.clock = pass
          shard_memo.clock_dirty = true
        end
        local next_pass = pass + 1 / p.weight
        local more = (limit == nil or running < limit) and redis.call('LLEN', sk.prefix .. t) > 0
        local spent = wait ~= nil and wait > SHARD_PARK_AFTER_US
        if not more then
          -- Drained or at its limit: out of the order (and the window).
          shard_head_leave(sk, e, t, top[1], next_pass)
        elseif spent then
          -- Its rate is spent: it waits out of the order, its next pass kept.
          shard_win_drop(e)
          shard_rate_park(sk, t, top[1], next_pass, due)
        elseif e ~= nil and p.floor == 0 then
          -- Still runnable: same member, later pass, kept in the window.
          shard_win_advance(e, next_pass)
        else
          -- Still runnable with a floor: its pass and its floor entry are
          -- written at once, so the window is written and read again after.
          shard_win_flush(sk)
          local m = top[1]
          redis.call('ZADD', sk.ready, fj_num(next_pass), m)
          if running < p.floor then
            redis.call('ZADD', sk.floorq, fj_num(next_pass), m)
            shard_memo.floor_any = true
          elseif floored or p.floor > 0 then
            redis.call('ZREM', sk.floorq, m)
          end
        end
        return t, job
      end
    end
  end
  return nil
end

local function redis_now(offset)
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000 + (tonumber(offset) or 0)
end

local function bury(dead, now, entry)
  redis.call('ZADD', dead, string.format('%.6f', now), entry)
  redis.call('ZREMRANGEBYSCORE', dead, '-inf', string.format('(%.6f', now - 15552000))
  redis.call('ZREMRANGEBYRANK', dead, 0, -10001)
end

-- Fair yield's record of one running iterable job (HASH `runs`, jid ->
-- `tenant|worker|started|asked|ignored|seen`, tenant and worker encoded, times
-- in epoch seconds; asked 0 = not asked).
-- A fair-yield run record: `tenant|worker|started|asked|ignored|seen`, and
-- since they were added `|reason|last` (when an earlier run of the job was
-- last asked; worker '' for a job between runs); an older record parses.
local function yield_parse(v)
  local t, w, s, a, ig, seen, why, last = string.match(v or '',
    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|?([^|]*)|?([^|]*)$')
  if t == nil then return nil end
  return { t = t, w = w, started = tonumber(s) or 0, asked = tonumber(a) or 0,
    ignored = ig == '1', seen = tonumber(seen) or 0, reason = why or '',
    last = tonumber(last) or 0 }
end

local function yield_format(e)
  return e.t .. '|' .. e.w .. '|' .. fj_num(e.started) .. '|' .. fj_num(e.asked) .. '|'
    .. (e.ignored and '1' or '0') .. '|' .. fj_num(e.seen) .. '|' .. (e.reason or '') .. '|'
    .. fj_num(e.last or 0)
end
