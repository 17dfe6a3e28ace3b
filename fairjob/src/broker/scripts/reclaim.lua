--! use clock
-- Claim entries of a lease set (released slot waiters staged in Redis Cluster
-- mode) whose lease ran out because their deliverer died: each gets a new
-- lease and is returned for delivery.
-- KEYS[1] = the set (entry -> lease expiry ms). ARGV[1] = max entries, ARGV[2] = lease ms.
local now_ms = fj_now_ms()
local stale = redis.call('ZRANGE', KEYS[1], '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(stale) do
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), m)
end
return stale
