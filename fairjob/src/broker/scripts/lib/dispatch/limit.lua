--! use dispatch/settings
-- A tenant's running limit (the twin of fairjob::policy::dispatch::limit):
-- cap, burst while alone, fair yield's share hold.

-- Another tenant than `t` is in the dispatch order (has pending work it may run).
local function shard_others_ready(sk, t)
  local n = redis.call('ZCOUNT', sk.ready, '-inf', '(+inf')
  if n == 0 then return false end
  if redis.call('HEXISTS', sk.rmember, t) == 1 then n = n - 1 end
  return n > 0
end

-- `t`'s running limit now: its cap, or its burst (when above the cap) while
-- no other tenant is in the dispatch order; while another is, also at most
-- its share hold. nil = none.
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
