--! use clock
-- Claim due entries of `schedule` or `retry` (and promoting entries whose lease
-- expired because their poller died) into the source's promoting record under a
-- lease. The poller then runs the client middleware and pushes each with
-- push.lua, which removes it from that record in the same step (for a sharded
-- queue: right after the push), so an entry is never lost. The record is tagged
-- with the source's name: both keys share a cluster slot.
-- KEYS[1] = schedule or retry, KEYS[2] = its promoting record.
-- ARGV[1] = max entries, ARGV[2] = lease ms, ARGV[3] = clock offset.
local now = redis_now(ARGV[3])
local now_ms = math.floor(now * 1000)
local limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
local stale = redis.call('ZRANGE', KEYS[2], '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, limit)
for _, m in ipairs(stale) do
  redis.call('ZADD', KEYS[2], now_ms + lease, m)
  out[#out + 1] = m
end
if #out < limit then
  local due = redis.call('ZRANGE', KEYS[1], '-inf', string.format('%.6f', now), 'BYSCORE', 'LIMIT', 0, limit - #out)
  for _, m in ipairs(due) do
    redis.call('ZREM', KEYS[1], m)
    redis.call('ZADD', KEYS[2], now_ms + lease, m)
    out[#out + 1] = m
  end
end
return out
