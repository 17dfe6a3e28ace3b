--! use clock, yield
-- Fair yield's decision, written: share holds, then requests to yield.
-- Holds: each listed tenant's `h:<tenant>` in the policy hash is set to
-- `<limit>|<until µs>` (Redis's clock plus the given time to live), or
-- removed for an empty limit (see shard_limit in lib/dispatch/limit.lua).
-- Requests: each listed job still recorded in `runs` and not asked within
-- the cool-down (in this run or an earlier one) is marked asked now, with the reason (its worker reads it at
-- its next tick, see shard_yield.lua), and its tenant's requests are counted.
-- KEYS[1] = runs, KEYS[2] = yield stats, KEYS[3] = policy.
-- ARGV[1] = cool-down seconds, ARGV[2] = hold time to live (µs), ARGV[3] =
--   number of holds, then (tenant, limit or '') per hold, then (jid, run
--   start, reason) per request: a job whose recorded run is not that one (it
--   yielded and runs again) is left alone.
-- Returns the jids marked.
local now = redis_now()
local cooldown = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local nholds = tonumber(ARGV[3])
local at = 4
for _ = 1, nholds do
  local t, limit = ARGV[at], ARGV[at + 1]
  if limit == '' then
    redis.call('HDEL', KEYS[3], 'h:' .. t)
  else
    redis.call('HSET', KEYS[3], 'h:' .. t, limit .. '|' .. string.format('%d', fj_now_us() + ttl))
  end
  at = at + 2
end
local out = {}
for i = at, #ARGV - 2, 3 do
  local e = yield_parse(redis.call('HGET', KEYS[1], ARGV[i]))
  if e and math.abs(e.started - (tonumber(ARGV[i + 1]) or 0)) <= 0.001
    and now - math.max(e.asked, e.last) >= cooldown then
    e.asked = now
    e.ignored = false
    e.reason = ARGV[i + 2]
    redis.call('HSET', KEYS[1], ARGV[i], yield_format(e))
    redis.call('HINCRBY', KEYS[2], 'r:' .. e.t, 1)
    out[#out + 1] = ARGV[i]
  end
end
return out
