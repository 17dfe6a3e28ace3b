--! use clock
-- Claim one fire time of a periodic schedule: the idempotent per-(schedule,
-- fire time) step that makes the enqueue exactly-once without a leader. Only
-- the caller that finds the schedule's next fire time still equal to the one
-- it decided on wins (compare-and-set), and a fire time at or before the
-- schedule's last one is never claimed again (a restart, an old worker beside
-- a new one). The winner's job goes into the firing record under a lease; the
-- push script removes it from there in the same step as the push, and a claim
-- whose poller died is pushed by another once the lease expires.
-- KEYS[1] = due zset, KEYS[2] = the schedule's state hash, KEYS[3] = firing zset.
-- ARGV[1] = name, ARGV[2] = expected next fire time (s), ARGV[3] = fire time
--   to enqueue (s, '' = none: missed and skipped), ARGV[4] = new next fire
--   time (s, '' = never), ARGV[5] = job payload, ARGV[6] = jid, ARGV[7] =
--   '1' to skip while the previous run is live (overlap = skip), ARGV[8] =
--   lease ms, ARGV[9] = clock offset, ARGV[10] = '1' when fire times were missed.
-- Returns 'stale' (another poller moved it on), 'gone' (removed or paused),
-- 'missed', 'skipped' (overlap) or 'claimed'.
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur then return 'gone' end
if tonumber(cur) ~= tonumber(ARGV[2]) then return 'stale' end
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
end
local now = redis_now(ARGV[9])
if ARGV[10] == '1' then redis.call('HINCRBY', KEYS[2], 'missed', 1) end
if ARGV[3] == '' then
  redis.call('HSET', KEYS[2], 'last_outcome', 'missed', 'last_at', string.format('%.3f', now))
  return 'missed'
end
local fire = tonumber(ARGV[3])
local last = tonumber(redis.call('HGET', KEYS[2], 'last_fire') or '-1')
if fire <= last then return 'stale' end
if ARGV[7] == '1' and redis.call('HEXISTS', KEYS[2], 'active') == 1 then
  redis.call('HSET', KEYS[2], 'last_fire', ARGV[3], 'last_outcome', 'skipped',
    'last_at', string.format('%.3f', now))
  redis.call('HINCRBY', KEYS[2], 'skipped', 1)
  return 'skipped'
end
redis.call('HSET', KEYS[2], 'last_fire', ARGV[3], 'last_outcome', 'enqueued',
  'last_jid', ARGV[6], 'last_at', string.format('%.3f', now))
redis.call('HINCRBY', KEYS[2], 'fires', 1)
if ARGV[7] == '1' then redis.call('HSET', KEYS[2], 'active', ARGV[6]) end
redis.call('ZADD', KEYS[3], math.floor(now * 1000) + tonumber(ARGV[8]), ARGV[5])
return 'claimed'
