--! use dispatch/reserve
-- Heal a sharded queue's bookkeeping after Redis lost recent writes (an AOF
-- everysec crash, a failover): running counts are recounted from the
-- in-progress records of every worker that fetched from it (all in this
-- queue's slot; the caller lists them, and the script refuses to count when a
-- fetcher it was not given has appeared since),
-- and each listed tenant is re-checked against its jobs: in the dispatch order
-- exactly when runnable, in the tenant set exactly while it has pending or
-- running jobs. One script, so nothing moves while it counts; its cost is the
-- jobs in flight on the queue plus the listed tenants.
--
-- KEYS[1..13] = the shard state, KEYS[14] = wake, KEYS[15] = the queue's
--   fetchers, KEYS[16..] = in-progress records of the queue, one per worker.
-- ARGV[1] = shard prefix, ARGV[2] = number of workers w, ARGV[3..2+w] = their
--   identities (in the order of their records), ARGV[3+w..] = encoded tenants
--   to re-check. w = -1: re-check the tenants only (a pass's later calls; its
--   first recounted the running jobs).
-- Returns { running counts fixed, tenants fixed }, or { -1, 0 } when a
-- fetcher is missing from the list (the caller lists again).

local sk = shard_keys(1, ARGV[1])
local nw = tonumber(ARGV[2])
local recount = nw >= 0
if not recount then nw = 0 end
local given = {}
for i = 3, 2 + nw do given[ARGV[i]] = true end
if recount then
  for _, w in ipairs(redis.call('SMEMBERS', KEYS[2 + SHARD_NKEYS])) do
    if not given[w] then return { -1, 0 } end
  end
end
local counted = {}
for i = 3 + SHARD_NKEYS, #KEYS do
  local tokens = redis.call('HKEYS', KEYS[i])
  for _, token in ipairs(tokens) do
    local t = string.match(token, '^[^|]*|[^|]*|(.*)$')
    if t then counted[t] = (counted[t] or 0) + 1 end
  end
end
local fixed_counts, fixed_tenants, entered = 0, 0, false
local function fix(t, want)
  if want > 0 then
    redis.call('HSET', sk.running, t, want)
    redis.call('SADD', sk.tenants, t)
  else
    redis.call('HDEL', sk.running, t)
    shard_running_tidy(sk)
  end
  shard_memo.counts[t] = want
  fixed_counts = fixed_counts + 1
  if shard_consider(sk, t) then entered = true end
end
if recount then
  local running = redis.call('HGETALL', sk.running)
  for i = 1, #running, 2 do
    local t, have = running[i], tonumber(running[i + 1])
    if t ~= SHARD_RUNNING_MARK then
      local want = counted[t] or 0
      counted[t] = nil
      if have ~= want then fix(t, want) end
    end
  end
  for t, want in pairs(counted) do
    fix(t, want)
  end
end
for i = 3 + nw, #ARGV do
  local t = ARGV[i]
  local pending = redis.call('LLEN', sk.prefix .. t)
  local busy = shard_running(sk, t)
  local listed = redis.call('SISMEMBER', sk.tenants, t) == 1
  local ready = redis.call('HGET', sk.rmember, t) ~= false
  if pending == 0 and busy == 0 then
    if listed or ready then
      redis.call('SREM', sk.tenants, t)
      shard_remember(sk, t, shard_unready(sk, t))
      fixed_tenants = fixed_tenants + 1
    end
  else
    if not listed then
      redis.call('SADD', sk.tenants, t)
      fixed_tenants = fixed_tenants + 1
    end
    local should = shard_runnable(sk, t)
    if should ~= ready then fixed_tenants = fixed_tenants + 1 end
    if shard_consider(sk, t) then entered = true end
  end
end
if entered then
  fj_wake(KEYS[1 + SHARD_NKEYS])
end
return { fixed_counts, fixed_tenants }
