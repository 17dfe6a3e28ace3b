-- Store one schedule (create or replace) and (re)compute its next fire time,
-- unless it is paused. A run-time schedule leaves the code set; a code one
-- joins it.
-- KEYS[1] = defs hash, KEYS[2] = due zset, KEYS[3] = code set, KEYS[4] = state.
-- ARGV[1] = name, ARGV[2] = entry JSON, ARGV[3] = next fire time (s, '' =
-- never), ARGV[4] = '1' for code, '0' for run time.
-- Returns 1 when the entry changed (or is new), 0 when it was the same.
local old = redis.call('HGET', KEYS[1], ARGV[1])
local changed = old ~= ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[4] == '1' then redis.call('SADD', KEYS[3], ARGV[1]) else redis.call('SREM', KEYS[3], ARGV[1]) end
local paused = redis.call('HGET', KEYS[4], 'paused') == '1'
if paused then return changed and 1 or 0 end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
elseif changed or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return changed and 1 or 0
