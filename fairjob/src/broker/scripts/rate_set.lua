--! use gcra, clock
-- Set a rate limiter's runtime limit, period and burst ('' = back to the
-- declared value, '-' = unchanged; limit 0 pauses the key) and schedule a release at once when
-- jobs wait, so a raised or resumed limit takes effect on the next release.
-- KEYS[1..4] = tat, conf, waiters, reserved; KEYS[5] = release schedule;
--   KEYS[6] = rate limiters registry set (Redis Cluster mode, ARGV[5] = 'c':
--   no KEYS[6], the caller registers; KEYS[5] is the limiter's own `next`).
-- ARGV[1] = limit, ARGV[2] = period µs, ARGV[3] = burst (each '' or '-' too),
--   ARGV[4] = registry member.
-- Returns how many jobs wait.
local rk = rate_keys(1, 5)
local names = { 'limit', 'per', 'burst' }
for i = 1, 3 do
  if ARGV[i] == '' then
    redis.call('HDEL', rk.conf, names[i])
  elseif ARGV[i] ~= '-' then
    redis.call('HSET', rk.conf, names[i], ARGV[i])
  end
end
if ARGV[5] ~= 'c' then redis.call('SADD', KEYS[6], ARGV[4]) end
local waiting = redis.call('LLEN', rk.waiters)
local limit = rate_effective(rk)
if waiting > 0 and limit > 0 then
  redis.call('ZADD', rk.due, fj_num(fj_now_us()), ARGV[4])
elseif limit <= 0 then
  redis.call('ZREM', rk.due, ARGV[4])
end
return waiting
