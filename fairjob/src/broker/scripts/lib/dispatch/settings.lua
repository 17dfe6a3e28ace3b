--! use dispatch/state, clock
-- A tenant's settings on a sharded queue (the twin of
-- fairjob::policy::dispatch::settings): one HASH `policy`, `c:<tenant>` (cap),
-- `w:<tenant>` (weight), `f:<tenant>` (floor), `r:<tenant>` (rate,
-- `<limit>/<period µs>`), `b:<tenant>` (burst), `h:<tenant>` (fair yield's
-- share hold, `<limit>|<until µs>`); tenant `*` holds the queue's defaults,
-- `y:…` its fair-yield settings (shard_yield.lua).

-- A policy hash of at most this many fields is read whole once per call by
-- the scripts that never write it (fetch and ack), instead of an HMGET per tenant.
local SHARD_POLICY_WHOLE_MAX = 64

-- The emission interval (µs) of a stored rate `<limit>/<period µs>` and the
-- starts its window checks (the largest divisor of limit not above 64); nil
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

-- A tenant's settings: cap (nil = none), weight (default 1), floor (default
-- 0), rate (its emission interval in µs, nil = none) and rwin (the starts its
-- window checks), burst (nil = none: the running limit while no other tenant
-- of the queue has pending work, when above the cap), hold (fair yield's
-- share hold in force, nil = none) and hold_raw (the stored hold, expired or not).
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
  local hl, hu = string.match(v[11] or '', '^(%d+)|(%d+)$')
  if hl and tonumber(hu) > fj_now_us() then p.hold = tonumber(hl) end
  shard_memo.settings[t] = p
  if all and shard_memo.policy_shared then shard_memo.policy_default = p end
  return p
end
