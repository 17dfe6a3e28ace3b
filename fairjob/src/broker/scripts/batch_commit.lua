--! use batch, clock
-- Flips a staged batch open (`Batch::commit`'s last step): its callbacks are
-- stored, its data lives as an open batch's, and from now on its staged
-- members are pushed (by the committer, or by a worker's sweep if the
-- committer died). An empty batch fires `complete` and `success` here.
-- KEYS[1] = the batch's hash.
-- ARGV[1] = clock offset, ARGV[2] = seconds the
-- data stays after `success`, then the callbacks' fields as (field, value)
-- pairs (see lib/batch.lua). For a child batch (one server only: the parent's
-- keys are in another cluster slot) the last two ARGV are '@parent' then the
-- parent's hash and the child's member id: the child joins its parent in
-- the same step as it opens.
-- Returns the events fired, or 0 when the batch is gone (its staging
-- expired), 1 when it was open already (a repeated commit), -1 when the
-- parent is gone and -2 when the parent fired `complete` (nothing changes).
local p = KEYS[1]
local state = redis.call('HGET', p, 'state')
if not state then return 0 end
if state == 'open' then return 1 end
local last = #ARGV
if ARGV[last - 2] == '@parent' then
  local adopted = fj_batch_adopt(ARGV[last - 1], p, ARGV[last])
  if adopted == 'gone' then return -1 end
  if adopted == 'finished' then return -2 end
  last = last - 3
end
local now = redis_now(ARGV[1])
redis.call('HSET', p, 'state', 'open', 'keep', ARGV[2], 'opened_at', string.format('%.6f', now))
for i = 3, last, 2 do
  redis.call('HSET', p, ARGV[i], ARGV[i + 1])
end
fj_batch_expire(p, FJ_BATCH_KEEP_OPEN)
return fj_batch_settle(p, now)
