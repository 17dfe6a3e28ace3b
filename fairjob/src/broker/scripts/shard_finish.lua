--! use dispatch/reserve, unique, batch, clock
-- End a fetched job of a tenant-sharded queue, fenced by its token: if the
-- token is gone from the worker's in-progress record of the queue (the job was
-- recovered from a worker whose lease expired), nothing changes. Otherwise, in
-- the same step: put the job back at the front of its tenant's shard ('front')
-- or not ('done': acked, or already written to Sidekiq's retry or dead set by
-- the caller), and release its tenant's running count, waking an idle worker
-- when that makes the tenant runnable again. Every key is in the queue's slot;
-- the caller counts fenced completions and undoes its retry/dead write.
--
-- KEYS[1] = in-progress hash, KEYS[2..14] = the shard state, KEYS[15] = wake.
-- ARGV[1] = token, ARGV[2] = 'done' | 'front' | 'back', ARGV[3] = payload (front, back),
--   ARGV[4] = shard prefix, ARGV[5] = encoded tenant.
-- ARGV[6] = '' or a unique job's lock prefix to release its lock (the job
--   succeeded or died), ARGV[7] = its digest, ARGV[8] = its jid.
-- ARGV[9] = '' (or absent), or 'done' / 'dead' for a job a relay keeps
--   (fairjob-postgres' "Postgres stays the truth") whose run this ends,
--   ARGV[10] = its jid: its end is recorded in the same step (pushed to the
--   relay's completion list KEYS[16], the jid removed from its live set
--   KEYS[17]; one server only: those keys are in another cluster slot).
-- ARGV[11] = '' (or absent) or, for a batch member whose run this ends, its
--   batch's hash, ARGV[12] = its jid, ARGV[13] = its outcome
--   (ok|retry|dead|discarded), ARGV[14] = its failure, ARGV[15] = the clock
--   offset: as finish.lua's ARGV[16..19] (one server only).
-- Returns 1 (3: as finish.lua's), or 0 when fenced.

if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local sk = shard_keys(2, ARGV[4])
local wake = false
if ARGV[2] == 'front' or ARGV[2] == 'back' then
  -- 'back': a job that yielded goes to the tail of its tenant's shard.
  if shard_push(sk, ARGV[5], ARGV[3], ARGV[2] == 'front') then wake = true end
end
if shard_release(sk, ARGV[5]) then wake = true end
if ARGV[6] ~= nil and ARGV[6] ~= '' then
  unique_release({ prefix = ARGV[6] }, ARGV[7], ARGV[8])
end
if ARGV[9] ~= nil and ARGV[9] ~= '' then
  redis.call('RPUSH', KEYS[16], ARGV[9] .. ' ' .. ARGV[10])
  redis.call('SREM', KEYS[17], ARGV[10])
end
local more = false
if ARGV[11] ~= nil and ARGV[11] ~= '' then
  fj_batch_end(ARGV[11], ARGV[12], ARGV[13], redis_now(ARGV[15]), ARGV[14])
  more = fj_batch_more(ARGV[11])
end
if wake then
  fj_wake(KEYS[2 + SHARD_NKEYS])
end
if more then return 3 end
return 1
