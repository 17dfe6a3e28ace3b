--! use common
-- Rate limits (GCRA; the twin of fairjob::policy::gcra, whose `judge` is the
-- Rust). A limiter's keys share one hash tag: tat (STRING, the theoretical
-- arrival time in µs, expiring once in the past), conf (HASH: the declared
-- `dlimit`, `dper` µs, `dburst` written by the job's workers, and the runtime
-- overrides `limit`, `per`, `burst`; `released`: waiters released so far), waiters (LIST, FIFO, entries as in
-- lib/common.lua), reserved (ZSET jid -> expiry µs: released waiters whose start
-- was already counted). The release schedule `due` (ZSET encoded key -> µs
-- when the key next has room) is shared by every limiter; in Redis Cluster
-- mode the scripts get the limiter's own `next` (same shape, one member, in
-- its slot) instead, which the caller mirrors into the shared one, and
-- released waiters are staged in `releasing` (ZSET entry -> lease expiry ms)
-- for the caller to deliver to their queues (each in its own slot).

-- The keys of a limiter from KEYS[first..], and the release schedule.
local function rate_keys(first, schedule)
  return { tat = KEYS[first], conf = KEYS[first + 1], waiters = KEYS[first + 2],
    reserved = KEYS[first + 3], due = KEYS[schedule], staged = {} }
end

-- The effective limit, period (µs) and burst: the override, else the
-- declaration (given by the caller, or as stored in conf).
local function rate_effective(rk, dl, dp, db)
  if dl then
    local c = redis.call('HMGET', rk.conf, 'limit', 'per', 'burst')
    return tonumber(c[1] or dl), tonumber(c[2] or dp), tonumber(c[3] or db)
  end
  local c = redis.call('HMGET', rk.conf, 'limit', 'per', 'burst', 'dlimit', 'dper', 'dburst')
  return tonumber(c[1] or c[4] or 0), tonumber(c[2] or c[5] or 1000000), tonumber(c[3] or c[6] or 0)
end

-- The rule: nil when paused; true and the new tat when a start is allowed;
-- false and the earliest allowed time otherwise.
local function rate_judge(limit, per, burst, tat, now)
  if limit <= 0 then return nil end
  local t = math.ceil(per / limit)
  if tat == nil or tat < now then tat = now end
  local tol = t * burst
  if tat - now <= tol then return true, tat + t end
  return false, tat - tol
end

local function rate_tat(rk)
  return tonumber(redis.call('GET', rk.tat))
end

local function rate_store(rk, tat, now)
  redis.call('SET', rk.tat, fj_num(tat), 'PX', math.floor((tat - now) / 1000) + 1000)
end

-- Moves as many waiters as the rule allows now (at most `max`) to the front
-- of their queues, their starts counted and reserved until `ttl` µs from now,
-- and schedules the key's next release (or drops it from `due` when nobody
-- waits or the key is paused). Returns how many were released and the next
-- release time (-1 for none).
local function rate_release_waiters(rk, member, now, ttl, max, qp, wp)
  local limit, per, burst = rate_effective(rk)
  local released = 0
  while true do
    if redis.call('LLEN', rk.waiters) == 0 then
      redis.call('ZREM', rk.due, member)
      if released > 0 then redis.call('HINCRBY', rk.conf, 'released', released) end
      return released, -1
    end
    local ok, v = rate_judge(limit, per, burst, rate_tat(rk), now)
    if ok == nil then
      redis.call('ZREM', rk.due, member)
      return released, -1
    end
    if not ok then
      redis.call('ZADD', rk.due, fj_num(v), member)
      if released > 0 then redis.call('HINCRBY', rk.conf, 'released', released) end
      return released, v
    end
    if released >= max then
      redis.call('HINCRBY', rk.conf, 'released', released)
      redis.call('ZADD', rk.due, fj_num(now), member)
      return released, now
    end
    rate_store(rk, v, now)
    local e = redis.call('LPOP', rk.waiters)
    local f = fj_fields(e)
    local jid, queue, encq, payload = f[1], f[2], f[3], f[4]
    if rk.releasing then
      redis.call('ZADD', rk.releasing, math.floor(now / 1000) + rk.lease_ms, e)
      rk.staged[#rk.staged + 1] = e
    else
      redis.call('RPUSH', qp.prefix .. queue, payload)
      fj_wake(wp.prefix .. encq)
    end
    redis.call('ZADD', rk.reserved, fj_num(now + ttl), jid)
    released = released + 1
  end
end
