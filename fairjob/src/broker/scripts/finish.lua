--! use common, clock, slots, unique, batch
-- End a fetched job's stay in the in-progress record, fenced by its token: if
-- the token is gone (the job was recovered from a worker whose lease expired),
-- nothing changes and the stale completion is counted. Otherwise, in the same
-- step: ack, schedule a retry, bury in `dead`, or put the job back in its queue
-- (front: next to run). Jobs of tenant-sharded queues end in shard_finish.lua.
--
-- KEYS[1] = in-progress hash, KEYS[2] = fenced counter, KEYS[3] = destination
--   (retry/dead zset, or queue list), KEYS[4] = wake list.
--   For a job holding a slot, after those: KEYS[5..9] = limit, holders,
--   reserved, waiters, and this worker's slot record.
-- ARGV[1] = token, ARGV[2] = action (ack|retry|dead|front|back), ARGV[3] = payload,
--   ARGV[4] = retry delay seconds, ARGV[5] = clock offset,
--   ARGV[6] = '' or the slot holder id, ARGV[7] = default limit, ARGV[8] = reservation ttl ms,
--   ARGV[9], ARGV[10] = the queue and wake key prefixes (for released waiters);
--   ARGV[6..10] are '' for a job without a slot.
-- ARGV[11] = '1' for a recovery by the reaper: then the last KEY (before the
--   relay's two, see ARGV[15]) is the owner's lease, and nothing happens
--   (returns 2) if it exists again.
-- ARGV[12] = '' or a unique job's lock prefix to release its lock (an ack or
--   a burial: the job succeeded or died), ARGV[13] = its digest, ARGV[14] = its jid.
-- ARGV[15] = '' (or absent) or, for a job a relay keeps (fairjob-postgres'
--   "Postgres stays the truth"), its jid: an ack or a burial then records the
--   job's end in the same step (`done <jid>` / `dead <jid>` pushed to the
--   relay's completion list, the jid removed from its live set), and the last
--   two KEYS (after the lease) are that list and that set.
-- ARGV[16] = '' (or absent) or, for a batch member whose run this ends (ack,
--   retry, dead), its batch's hash (lib/batch.lua; one server only: the
--   batch's keys are in another cluster slot), ARGV[17] = its jid,
--   ARGV[18] = its outcome (ok|retry|dead|discarded), ARGV[19] = its failure:
--   the member leaves the batch's sets and an event it completes fires, in
--   the same step.
-- Returns 1 (3: done, and the member's workflow has dependents left to
-- tell: see workflow_work.lua), or 0 when fenced (a fenced completion releases no slot: the
-- recovery that took the job released it).

local kept = ARGV[15] ~= nil and ARGV[15] ~= ''
local nkeys = #KEYS
if kept then
  nkeys = nkeys - 2
end
if ARGV[11] == '1' and redis.call('EXISTS', KEYS[nkeys]) == 1 then
  -- A recovery, but the owner renewed its lease meanwhile: the job stays its own.
  return 2
end
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  redis.call('INCR', KEYS[2])
  return 0
end
local action = ARGV[2]
if action == 'retry' then
  local now = redis_now(ARGV[5])
  redis.call('ZADD', KEYS[3], string.format('%.6f', now + tonumber(ARGV[4])), ARGV[3])
elseif action == 'dead' then
  bury(KEYS[3], redis_now(ARGV[5]), ARGV[3])
elseif action == 'front' then
  redis.call('RPUSH', KEYS[3], ARGV[3])
  fj_wake(KEYS[4])
elseif action == 'back' then
  -- A job that yielded: behind everything waiting.
  redis.call('LPUSH', KEYS[3], ARGV[3])
  fj_wake(KEYS[4])
end
if kept and (action == 'ack' or action == 'dead') then
  local state = 'done'
  if action == 'dead' then
    state = 'dead'
  end
  redis.call('RPUSH', KEYS[nkeys + 1], state .. ' ' .. ARGV[15])
  redis.call('SREM', KEYS[nkeys + 2], ARGV[15])
end
local more = false
if ARGV[16] ~= nil and ARGV[16] ~= '' then
  fj_batch_end(ARGV[16], ARGV[17], ARGV[18], redis_now(ARGV[5]), ARGV[19])
  more = fj_batch_more(ARGV[16])
end
if ARGV[12] ~= nil and ARGV[12] ~= '' then
  unique_release({ prefix = ARGV[12] }, ARGV[13], ARGV[14])
end
if ARGV[6] ~= '' then
  local lk = { limit = KEYS[5], holders = KEYS[6], reserved = KEYS[7], waiters = KEYS[8] }
  slot_release(lk, KEYS[9], ARGV[1], ARGV[6], ARGV[7], ARGV[8], { prefix = ARGV[9] }, { prefix = ARGV[10] })
end
if more then return 3 end
return 1
