--! use dispatch/reserve, reroute, unique
-- Enqueue a batch of jobs, all in one atomic step (jobs bound for one plain
-- queue are written with one LPUSH, in order): (optionally) take it out of
-- the promoting record, (optionally) register it in its tenant's reroute window
-- and choose its queue by the rules (the last matching rule wins), then push it
-- to a plain queue or a tenant shard and wake an idle worker.
--
-- The batch first lists the queues its jobs may go to, once each; a job's
-- candidates are indices into that list.
-- KEYS[1] = queues set when ARGV[3] is '1' (the batch has a plain queue; a push
--   to sharded queues alone stays in their cluster slot, and the worker
--   announces them); then each queue's keys, then each job's keys.
-- ARGV[1] = clock offset (seconds, tests only), ARGV[2] = number of jobs,
--   ARGV[3] = '1' or '0', ARGV[4] = number of queues; per queue:
--     name, JSON string of the name, kind
--     kind 'p': [KEYS: list, wake]
--     kind 's': shard prefix [KEYS: the shard state (ShardKeys::state()), wake]
--   then per job:
--     src member ('' = none)                       [KEY: promoting zset]
--     window member 'jid:<jid>' ('' = no reroute)  [KEY: window zset]
--       max window seconds, rule count, then per rule: threshold, per seconds
--     payload before the queue value, payload after it
--     encoded tenant (for a sharded queue), candidate count, candidate queue indices
--     unique digest ('' = not unique); when not '': the lock prefix, the jid,
--       the lock's ttl ms, '1' to replace a waiting holder ('0' to reject)
--     once member ('' = none) [KEY: the queue slot's pushed zset], then the
--       marks' retention ms: a job whose member is already marked was pushed
--       by an earlier attempt (a relay's push whose note of it was never
--       written, or the two-step push of a claimed job, whose claim lives in
--       another slot) and is not pushed again; the mark is set by the same
--       `ZADD NX` that checks it, and taken back when the job is not pushed
--       (a unique duplicate)
-- Returns, per job, the 1-based index of the chosen candidate, or 0 when the
-- source entry was already gone (another poller promoted it) or its once
-- member was marked; for a unique
-- job whose key is held: {'d', holder jid} (not pushed), or {'r', holder jid}
-- when the holder waited in the job's own plain queue and took this payload
-- (in place, under its own jid). A promoted job (src) is never refused: it
-- (re)takes its lock unless another jid holds it.

local ki, ai = 1, 5
if ARGV[3] == '1' then ki = 2 end
local queues = {}
for q = 1, tonumber(ARGV[4]) do
  local queue = { name = ARGV[ai], qjson = ARGV[ai + 1], kind = ARGV[ai + 2] }
  ai = ai + 3
  if queue.kind == 'p' then
    queue.list = KEYS[ki]; queue.wake = KEYS[ki + 1]; ki = ki + 2
    queue.items = {}
  else
    queue.sk = shard_keys(ki, ARGV[ai]); ai = ai + 1
    ki = ki + SHARD_NKEYS
    queue.wake = KEYS[ki]; ki = ki + 1
  end
  queues[q] = queue
end
local results = {}
local woken = {}
local now = nil
local seen = {} -- the reroute windows judged in this call (lib/reroute.lua)
local once_ms, trimmed = nil, {} -- the once marks' clock and trimmed slots
-- Marks `member` (1), or finds it marked (0); the clock is read, and each
-- slot's expired marks trimmed, once a call, after the check (a mark is
-- honoured however old; the trim only bounds the set).
local function once_mark(key, member, keep)
  if not once_ms then once_ms = math.floor(redis_now(ARGV[1]) * 1000) end
  local added = redis.call('ZADD', key, 'NX', once_ms, member)
  if not trimmed[key] then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', once_ms - keep)
    trimmed[key] = true
  end
  return added
end
for jn = 1, tonumber(ARGV[2]) do
  local src = ARGV[ai]; ai = ai + 1
  local src_key = nil
  if src ~= '' then src_key = KEYS[ki]; ki = ki + 1 end
  local member = ARGV[ai]; ai = ai + 1
  local window_key = nil
  local maxw, rules = 0, {}
  if member ~= '' then
    window_key = KEYS[ki]; ki = ki + 1
    maxw = tonumber(ARGV[ai]); local nrules = tonumber(ARGV[ai + 1]); ai = ai + 2
    for r = 1, nrules do
      rules[r] = { tonumber(ARGV[ai]), tonumber(ARGV[ai + 1]) }; ai = ai + 2
    end
  end
  local before, after, tenant = ARGV[ai], ARGV[ai + 1], ARGV[ai + 2]; ai = ai + 3
  local cands = {}
  local ncand = tonumber(ARGV[ai]); ai = ai + 1
  for c = 1, ncand do
    cands[c] = queues[tonumber(ARGV[ai])]; ai = ai + 1
  end
  local digest = ARGV[ai]; ai = ai + 1
  local u, jid, ttl, replace = nil, nil, nil, false
  if digest ~= '' then
    u = { prefix = ARGV[ai] }
    jid, ttl, replace = ARGV[ai + 1], tonumber(ARGV[ai + 2]), ARGV[ai + 3] == '1'
    ai = ai + 4
  end

  local once = ARGV[ai]; ai = ai + 1
  local once_key, once_keep = nil, nil
  if once ~= '' then
    once_key = KEYS[ki]; ki = ki + 1
    once_keep = tonumber(ARGV[ai]); ai = ai + 1
  end

  local holder = nil
  if src_key and redis.call('ZREM', src_key, src) == 0 then
    results[jn] = 0
  elseif once_key and once_mark(once_key, once, once_keep) == 0 then
    results[jn] = 0
  elseif u and not src_key then
    holder = unique_take(u, digest, jid, ttl)
  elseif u then
    unique_take(u, digest, jid, ttl)
  end
  if holder then
    local own = cands[1]
    local waiting = nil
    if replace and own.kind == 'p' then waiting = unique_waiting(u, digest) end
    local at = nil
    -- Bounded: only the newest 1,000 entries (the head, where pushes go)
    -- are searched, so a long queue never makes this script slow; a holder
    -- deeper in the queue is not replaced (the push is a duplicate).
    if waiting then at = redis.call('LPOS', own.list, waiting, 'MAXLEN', 1000) end
    if at then
      local payload = unique_swap_jid(before .. own.qjson .. after, jid, holder)
      redis.call('LSET', own.list, at, payload)
      unique_waits_as(u, digest, payload)
      unique_touch(u, digest, ttl)
      results[jn] = { 'r', holder }
    else
      results[jn] = { 'd', holder }
      if once_key then redis.call('ZREM', once_key, once) end
    end
  elseif results[jn] == nil then
    local chosen = 1
    if window_key then
      if not now then now = math.floor(redis_now(ARGV[1])) end
      chosen = window_choose(window_key, now, member, maxw, rules, seen)
    end
    local queue = cands[chosen]
    local payload = before .. queue.qjson .. after
    if replace then unique_waits_as(u, digest, payload) end
    if queue.kind == 'p' then
      -- Plain queues are written once per batch, below (one LPUSH per list).
      queue.items[#queue.items + 1] = payload
    else
      shard_push(queue.sk, tenant, payload, false)
      woken[queue] = true
    end
    results[jn] = chosen
  end
end
for _, queue in ipairs(queues) do
  if queue.kind == 'p' and #queue.items > 0 then
    if ARGV[3] == '1' then redis.call('SADD', KEYS[1], queue.name) end
    for i = 1, #queue.items, 500 do
      redis.call('LPUSH', queue.list, unpack(queue.items, i, math.min(i + 499, #queue.items)))
    end
    woken[queue] = true
  end
end
for _, queue in ipairs(queues) do
  if woken[queue] then
    fj_wake(queue.wake)
  end
end
return results
