--! use clock
-- Take over claimed fire times whose poller died before pushing them (their
-- lease expired): re-lease them to the caller and return them.
-- KEYS[1] = firing zset. ARGV[1] = max entries, ARGV[2] = lease ms,
-- ARGV[3] = clock offset.
local now_ms = math.floor(redis_now(ARGV[3]) * 1000)
local stale = redis.call('ZRANGE', KEYS[1], '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(stale) do
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), m)
end
return stale
