-- Ask running iterable jobs of a tenant-sharded queue to yield: each listed
-- job still recorded in `runs` and not asked within the cool-down is marked
-- asked now (its worker reads it at its next tick, see shard_yield.lua), and
-- its tenant's requests are counted.
-- KEYS[1] = runs, KEYS[2] = yield stats.
-- ARGV[1] = cool-down seconds, then (jid, run start) pairs: a job whose
--   recorded run is not that one (it yielded and runs again) is left alone.
-- Returns the jids marked.
local now = redis_now()
local cooldown = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV - 1, 2 do
  local e = yield_parse(redis.call('HGET', KEYS[1], ARGV[i]))
  if e and math.abs(e.started - (tonumber(ARGV[i + 1]) or 0)) <= 0.001
    and (e.asked == 0 or now - e.asked >= cooldown) then
    e.asked = now
    e.ignored = false
    redis.call('HSET', KEYS[1], ARGV[i], yield_format(e))
    redis.call('HINCRBY', KEYS[2], 'r:' .. e.t, 1)
    out[#out + 1] = ARGV[i]
  end
end
return out
