--! use common, clock
-- Slot limits (the twin of fairjob::policy::slots): at most N jobs of a key at once. A key's
-- keys share one hash tag: limit (STRING, the runtime override), holders (ZSET
-- holder id -> acquired at ms), reserved (HASH jid -> expiry ms: slots kept for
-- released waiters between their release and their start), waiters (LIST).
-- In Redis Cluster mode a key's keys also include `releasing` (ZSET entry ->
-- lease expiry ms): released waiters staged there for the caller to deliver
-- to their queues, which live in other slots.
-- A waiter entry is length-prefixed fields ("<len>:<bytes>"), so queue names and
-- payloads may hold any byte: jid, queue name, encoded queue name, payload. Key
-- names are never stored: a released waiter goes to `<queue prefix><name>` and
-- wakes `<wake prefix><encoded name>`, both prefixes given in ARGV. On a sharded
-- queue that list is the inbox, which the next fetch moves into the tenant's
-- shard by the payload's `fair_tenant`.

local function slot_limit(lk, default)
  local l = redis.call('GET', lk.limit)
  if l then return tonumber(l) end
  return tonumber(default)
end

-- Drops reservations whose waiter never started in time; returns how many remain.
local function slot_reserved(lk, now)
  local r = redis.call('HGETALL', lk.reserved)
  local n = 0
  for i = 1, #r, 2 do
    if tonumber(r[i + 1]) < now then
      redis.call('HDEL', lk.reserved, r[i])
    else
      n = n + 1
    end
  end
  return n
end

-- Moves as many waiters as there are free slots to the front of their queues,
-- each with a slot reserved for it. Returns how many were released.
local function slot_release_waiters(lk, default, ttl_ms, now, qp, wp)
  local free = slot_limit(lk, default) - redis.call('ZCARD', lk.holders) - slot_reserved(lk, now)
  local released = 0
  while free > 0 do
    local e = redis.call('LPOP', lk.waiters)
    if not e then break end
    local f = fj_fields(e)
    local jid, queue, encq, payload = f[1], f[2], f[3], f[4]
    if lk.releasing then
      -- Redis Cluster: the queue is in another slot. Staged under a lease;
      -- the caller delivers it and drops it from here (the reaper delivers
      -- entries whose lease ran out).
      redis.call('ZADD', lk.releasing, now + tonumber(ttl_ms), e)
      lk.out[#lk.out + 1] = e
    else
      redis.call('RPUSH', qp.prefix .. queue, payload)
      fj_wake(wp.prefix .. encq)
    end
    redis.call('HSET', lk.reserved, jid, now + tonumber(ttl_ms))
    free = free - 1
    released = released + 1
  end
  return released
end

-- Takes a slot for holder `holder` (job `jid`) if one is free or was reserved
-- for the job as a released waiter. Returns true when taken.
local function slot_try_take(lk, default, holder, jid)
  local now = fj_now_ms()
  local limit = slot_limit(lk, default)
  local reserved = slot_reserved(lk, now)
  local mine = redis.call('HDEL', lk.reserved, jid) == 1
  if mine or redis.call('ZCARD', lk.holders) + reserved < limit then
    redis.call('ZADD', lk.holders, now, holder)
    return true
  end
  return false
end

-- The keys of a slot limit from KEYS[first..]; in cluster mode (`staged`),
-- KEYS[first + 4] is the releasing set.
local function slot_keys(first, staged)
  local lk = { limit = KEYS[first], holders = KEYS[first + 1], reserved = KEYS[first + 2],
    waiters = KEYS[first + 3] }
  if staged then
    lk.releasing = KEYS[first + 4]
    lk.out = {}
  end
  return lk
end

-- A finished job gives back the slot it held: forgotten in the worker's slot
-- `record` and, if `holder` still held it, waiters move into the freed slots
-- (routed with the queue and wake key prefixes `qp`, `wp`).
local function slot_release(lk, record, token, holder, default, ttl_ms, qp, wp)
  redis.call('HDEL', record, token)
  if redis.call('ZREM', lk.holders, holder) == 1 then
    return slot_release_waiters(lk, default, ttl_ms, fj_now_ms(), qp, wp)
  end
  return 0
end
