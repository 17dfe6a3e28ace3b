--! use dispatch/settings, common
-- The stride order (the twin of fairjob::policy::dispatch::order): runnable
-- tenants in `ready` by pass, ties to the lower sequence number of their
-- member (`<15-digit seq><tenant>`, `rmember` maps tenant -> member); vt, the
-- pass of the last tenant served in share order; `lastpass`, the passes of
-- tenants out of the order while ahead of vt; `floorq`, the runnable tenants
-- under their floor.

-- The order's key: (pass `pa`, member `ma`) before (`pb`, `mb`). Members
-- differ in their 15-digit sequence number, so comparing them as Redis does,
-- by bytes, is comparing their numbers.
local function shard_before(pa, ma, pb, mb)
  if pa ~= pb then return pa < pb end
  return ma < mb
end

-- The pass after a dispatch at `pass` of a tenant with settings `p`.
local function shard_next_pass(pass, p)
  return pass + 1 / p.weight
end

-- A dispatch in share order (not from `floorq`) at `pass`: vt moves up to it.
local function shard_advance(sk, pass)
  if pass > shard_vt(sk) then
    shard_memo.clock = pass
    shard_memo.clock_dirty = true
  end
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
  if m or known then shard_order_tidy(sk) end
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
  redis.call('ZADD', sk.ready, fj_num(pass), m, '+inf', SHARD_READY_MARK)
  redis.call('HSET', sk.rmember, t, m, SHARD_RMEMBER_MARK, '1')
  local floor = shard_policy_of(sk, t).floor
  if floor > 0 and shard_running(sk, t) < floor then
    redis.call('ZADD', sk.floorq, fj_num(pass), m)
    shard_memo.floor_any = true
  end
end
