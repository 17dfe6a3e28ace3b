-- Claim due entries of `schedule` and `retry` (and promoting entries whose lease
-- expired because their poller died) into the promoting record under a lease.
-- The poller then runs the client middleware and pushes each with push.lua,
-- which removes it from the promoting record in the same step, so an entry is
-- never lost or pushed twice.
-- KEYS[1] = schedule, KEYS[2] = retry, KEYS[3] = promoting.
-- ARGV[1] = max entries, ARGV[2] = lease ms, ARGV[3] = clock offset.
local now = redis_now(ARGV[3])
local now_ms = math.floor(now * 1000)
local limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
local stale = redis.call('ZRANGE', KEYS[3], '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, limit)
for _, m in ipairs(stale) do
  redis.call('ZADD', KEYS[3], now_ms + lease, m)
  out[#out + 1] = m
end
for s = 1, 2 do
  if #out >= limit then break end
  local due = redis.call('ZRANGE', KEYS[s], '-inf', string.format('%.6f', now), 'BYSCORE', 'LIMIT', 0, limit - #out)
  for _, m in ipairs(due) do
    redis.call('ZREM', KEYS[s], m)
    redis.call('ZADD', KEYS[3], now_ms + lease, m)
    out[#out + 1] = m
  end
end
return out
