--! use gcra, clock, exit
-- Pass a fetched job through its rate limiter, or park it in the limiter's
-- FIFO list (leaving the in-progress record, and its tenant's running count
-- on a sharded queue), where it holds no worker until the release schedule
-- says the key has room. A job released from the list passes at once (its
-- start was counted when it was released). Nobody jumps the queue: while
-- jobs wait, a new one waits behind them. A limiter is registered when it
-- first parks a job (or is set at runtime).
-- KEYS[1..4] = tat, conf, waiters, reserved; KEYS[5] = release schedule;
--   KEYS[6] = in-progress hash; KEYS[7] = rate limiters registry set;
--   for a sharded job KEYS[8..20] = the shard state (ShardKeys::state()).
--   In Redis Cluster mode (ARGV[10] = 'c') only KEYS[1..5], KEYS[5] being the
--   limiter's own `next`: the caller registers the limiter before, and after
--   a park takes the job out of its record (and its tenant's running count)
--   and mirrors the schedule.
-- ARGV[1..3] = declared limit, period µs, burst; ARGV[4] = jid; ARGV[5] = token;
--   ARGV[6] = waiter entry; ARGV[7] = registry member (encoded key);
--   ARGV[8] = '' or shard prefix, ARGV[9] = encoded tenant, ARGV[10] = 'c' or ''.
-- Returns {1, 0} (passed), {0, next release µs or -1 when paused} (parked)
-- or {-1, 0} (the job is no longer this worker's).
local rk = rate_keys(1, 5)
local now = fj_now_us()
local reserved = redis.call('ZSCORE', rk.reserved, ARGV[4])
if reserved then
  redis.call('ZREM', rk.reserved, ARGV[4])
  if tonumber(reserved) >= now then return { 1, 0 } end
end
local limit, per, burst = rate_effective(rk, ARGV[1], ARGV[2], ARGV[3])
local ok, v = rate_judge(limit, per, burst, rate_tat(rk), now)
if ok and redis.call('LLEN', rk.waiters) == 0 then
  rate_store(rk, v, now)
  return { 1, 0 }
end
-- Parking: the limiter is registered (for the Limits page and the releaser,
-- which reads the declaration from conf), stale reservations dropped.
local cluster = ARGV[10] == 'c'
if not cluster then
  if not fj_park_leave(KEYS[6], ARGV[5], 8, ARGV[8], ARGV[9]) then return { -1, 0 } end
  redis.call('SADD', KEYS[7], ARGV[7])
end
redis.call('HSET', rk.conf, 'dlimit', ARGV[1], 'dper', ARGV[2], 'dburst', ARGV[3])
redis.call('ZREMRANGEBYSCORE', rk.reserved, '-inf', fj_num(now))
redis.call('RPUSH', rk.waiters, ARGV[6])
if ok == nil then return { 0, -1 } end
local at = redis.call('ZSCORE', rk.due, ARGV[7])
if at then return { 0, tonumber(at) } end
if ok then v = now end
redis.call('ZADD', rk.due, fj_num(v), ARGV[7])
return { 0, v }
