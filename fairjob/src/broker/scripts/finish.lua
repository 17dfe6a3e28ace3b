-- End a fetched job's stay in the in-progress record, fenced by its token: if
-- the token is gone (the job was recovered from a worker whose lease expired),
-- nothing changes and the stale completion is counted. Otherwise, in the same
-- step: ack, schedule a retry, bury in `dead`, or put the job back in its queue
-- (front: next to run), and release its tenant's running
-- count on a sharded queue.
--
-- KEYS[1] = in-progress hash, KEYS[2] = fenced counter, KEYS[3] = destination
--   (retry/dead zset, or queue list), KEYS[4] = wake list;
--   for a sharded job also KEYS[5..9] = ring, seq, running, limits, tenants.
--   For a job holding a slot, after those: limit, holders, reserved, waiters,
--   and this worker's slot record (KEYS[10..14] or KEYS[5..9] without shard keys).
-- ARGV[1] = token, ARGV[2] = action (ack|retry|dead|front), ARGV[3] = payload,
--   ARGV[4] = retry delay seconds, ARGV[5] = clock offset,
--   ARGV[6] = '' or the shard prefix, ARGV[7] = encoded tenant,
--   ARGV[8] = '' or the slot holder id, ARGV[9] = default limit, ARGV[10] = reservation ttl ms,
--   ARGV[11], ARGV[12] = the queue and wake key prefixes (for released waiters);
--   ARGV[8..12] are '' for a job without a slot.
-- ARGV[13] = '1' for a recovery by the reaper: then the last KEY is the owner's
--   lease, and nothing happens (returns 2) if it exists again.
-- Returns 1, or 0 when fenced (a fenced completion releases no slot: the
-- recovery that took the job released it).

if ARGV[13] == '1' and redis.call('EXISTS', KEYS[#KEYS]) == 1 then
  -- A recovery, but the owner renewed its lease meanwhile: the job stays its own.
  return 2
end
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  redis.call('INCR', KEYS[2])
  return 0
end
local action = ARGV[2]
local sk = nil
if ARGV[6] ~= '' then
  sk = { ring = KEYS[5], seq = KEYS[6], running = KEYS[7], limits = KEYS[8], tenants = KEYS[9], prefix = ARGV[6] }
end
if action == 'retry' then
  local now = redis_now(ARGV[5])
  redis.call('ZADD', KEYS[3], string.format('%.6f', now + tonumber(ARGV[4])), ARGV[3])
elseif action == 'dead' then
  bury(KEYS[3], redis_now(ARGV[5]), ARGV[3])
elseif action == 'front' then
  if sk then
    shard_push(sk, ARGV[7], ARGV[3], true)
  else
    redis.call('RPUSH', KEYS[3], ARGV[3])
  end
  redis.call('LPUSH', KEYS[4], '1')
  redis.call('LTRIM', KEYS[4], 0, 0)
end
if sk and shard_release(sk, ARGV[7]) then
  -- The tenant just became runnable again (it was at its limit): wake an idle
  -- worker now rather than at its next poll.
  redis.call('LPUSH', KEYS[4], '1')
  redis.call('LTRIM', KEYS[4], 0, 0)
end
if ARGV[8] and ARGV[8] ~= '' then
  local base = 5
  if sk then base = 10 end
  local lk = { limit = KEYS[base], holders = KEYS[base + 1], reserved = KEYS[base + 2], waiters = KEYS[base + 3] }
  redis.call('HDEL', KEYS[base + 4], ARGV[1])
  if redis.call('ZREM', lk.holders, ARGV[8]) == 1 then
    slot_release_waiters(lk, ARGV[9], ARGV[10], slot_now_ms(), { prefix = ARGV[11] }, { prefix = ARGV[12] })
  end
end
return 1
