--! use dispatch/limit, dispatch/order
-- A tenant's pace on a sharded queue (the twin of
-- fairjob::policy::dispatch::pace): GCRA on Redis's clock with the catch-up
-- credit and the window of its last starts (`rstate`: `t:<tenant>` its
-- theoretical arrival time, `s:<tenant>` its last starts, 16-digit µs each);
-- a tenant with its rate spent waits out of the order in `rwait` (tenant ->
-- µs when its rate next allows a start), its pass and member kept in
-- `rstate` (`p:`, `m:`).

-- Takes `t` (at the head of the order as member `m` with `pass`) out of the
-- order until `at` (µs), when its rate allows its next start; its pass and
-- member are kept.
local function shard_rate_park(sk, t, m, pass, at)
  redis.call('ZREM', sk.ready, m)
  redis.call('ZREM', sk.floorq, m)
  redis.call('HDEL', sk.rmember, t)
  shard_order_tidy(sk)
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
  redis.call('ZADD', sk.ready, fj_num(pass), m, '+inf', SHARD_READY_MARK)
  redis.call('HSET', sk.rmember, t, m, SHARD_RMEMBER_MARK, '1')
  if shard_running(sk, t) < shard_policy_of(sk, t).floor then
    redis.call('ZADD', sk.floorq, fj_num(pass), m)
    shard_memo.floor_any = true
  end
  return true
end

-- Brings back (at most `max`) tenants whose rate allows a start again.
local function shard_rate_wake(sk, max)
  if not shard_rwait_any(sk) then return end
  local due = redis.call('ZRANGEBYSCORE', sk.rwait, '-inf', fj_now_us(), 'LIMIT', 0, max)
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
  local tat, now = tonumber(v[1]), fj_now_us()
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
  local now = fj_now_us()
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
  local p, now = shard_policy_of(sk, t), fj_now_us()
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
