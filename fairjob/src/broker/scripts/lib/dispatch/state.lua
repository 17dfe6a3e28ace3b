--! per-call shard_memo_reset
-- A tenant-sharded queue's state (the twin of fairjob::policy::dispatch::state):
-- its keys, and the per-call memory of what a call has read of them. The
-- dispatch order's rules are in fairjob::policy::dispatch (the module doc says
-- them once); order.lua, limit.lua, pace.lua and reserve.lua are their twins,
-- function for function. A sharded queue's keys, its inbox included, hash to
-- one Redis Cluster slot (the tag is the inbox's name); a tenant's list is
-- `<prefix><encoded tenant>` (fj_encode).

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

-- A field of `running` that no tenant can have ('!' is always encoded) and
-- longer than Redis's listpack limit for a field (64 bytes): a hash holding
-- it is a hash table for good, so reading or writing one tenant's count
-- costs the same at any number of tenants (a listpack is scanned). Written
-- with the counts (cache.lua); every reader of the whole hash skips it
-- (policy::dispatch::state::RUNNING_MARK), and the hash goes with its last
-- count (shard_running_tidy): no tenant running, no key.
local SHARD_RUNNING_MARK = '!hash-table-------------------------------------------------------'
-- `rmember` carries the same mark, for the same reason (a dispatch's ack
-- reads the members of the tenants it releases), dropped with its last
-- member (shard_order_tidy).
local SHARD_RMEMBER_MARK = SHARD_RUNNING_MARK

-- A member of `ready` that no tenant's can be (members start with a digit)
-- and longer than Redis's listpack limit for a member (64 bytes), at +inf:
-- a sorted set holding it is a skiplist for good, so a dispatch's reads and
-- writes of the order cost O(log n) however few tenants it holds (at most
-- 128 members are a listpack, scanned). Written with every member that
-- enters the order (shard_enready, shard_rate_unpark); always last, so a
-- read of the order by rank stops at it and counts leave it out (`ZCOUNT
-- -inf (+inf`); the key goes with the last tenant (shard_order_tidy).
-- policy::dispatch::state::READY_MARK.
local SHARD_READY_MARK = '!skiplist-------------------------------------------------------------'

-- Per-call memory, new for each call (a function library calls
-- shard_memo_reset first, see fairjob::broker::scripts; one script call is
-- atomic, so what it read cannot change under it). `settings`: each tenant's settings, read once; `counts`: running
-- counts; `clock`: vt (`clock_dirty` once changed); `policy_whole` (set by a
-- script that never writes `policy`: a small one may be read whole once, see
-- shard_policy_table); `rwait_any` / `floor_any`: nil unknown, false when
-- `rwait` / `floorq` is known empty. The rest is cache.lua's: `win`,
-- `pend` (the order's head read ahead), `defer_counts` (running
-- counts change in `counts` alone and are written once at the end of the
-- call; `dirty` names the changed ones) and `members` (rmember entries read
-- ahead for the tenants of a batch).
local shard_memo
local function shard_memo_reset()
  shard_memo = { settings = {}, counts = {}, clock = nil, clock_dirty = false, floor_any = nil,
    policy_whole = false, policy_all = nil, rwait_any = nil, win = nil, pend = nil,
    defer_counts = false, dirty = {}, members = {}, policy_shared = false, policy_default = nil,
    order_left = false }
end
shard_memo_reset()

-- Drops the hash `key` when only its mark is left.
local function shard_hash_tidy(key, mark)
  if redis.call('HLEN', key) == 1 and redis.call('HEXISTS', key, mark) == 1 then
    redis.call('DEL', key)
  end
end

-- After counts were deleted: drops `running` when only the mark is left.
local function shard_running_tidy(sk)
  shard_hash_tidy(sk.running, SHARD_RUNNING_MARK)
end

-- After a tenant left the order: drops `ready` and `rmember` when only their
-- marks are left; in a call that ends with shard_flush, once, there
-- (`now`: the flush's own call).
local function shard_order_tidy(sk, now)
  if shard_memo.defer_counts and not now then
    shard_memo.order_left = true
    return
  end
  if redis.call('ZCARD', sk.ready) == 1
      and redis.call('ZSCORE', sk.ready, SHARD_READY_MARK) then
    redis.call('DEL', sk.ready)
  end
  shard_hash_tidy(sk.rmember, SHARD_RMEMBER_MARK)
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
    shard_running_tidy(sk)
    r = 0
  end
  shard_memo.counts[t] = r
  return r
end

local function shard_vt(sk)
  if shard_memo.clock == nil then
    shard_memo.clock = tonumber(redis.call('GET', sk.vt) or '0')
  end
  return shard_memo.clock
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
