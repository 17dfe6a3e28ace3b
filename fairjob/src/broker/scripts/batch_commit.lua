--! use batch, clock
-- Flips a staged batch open (`Batch::commit`'s last step): its callbacks are
-- stored, its data lives as an open batch's, and from now on its staged
-- members are pushed (by the committer, or by a worker's sweep if the
-- committer died). An empty batch fires `complete` and `success` here.
-- KEYS[1] = the batch's hash.
-- ARGV[1] = clock offset, ARGV[2] = seconds the
-- data stays after `success`, then the callbacks' fields as (field, value)
-- pairs (see lib/batch.lua).
-- Returns the events fired, or 0 when the batch is gone (its staging
-- expired) and 1 when it was open already (a repeated commit).
local p = KEYS[1]
local state = redis.call('HGET', p, 'state')
if not state then return 0 end
if state == 'open' then return 1 end
local now = redis_now(ARGV[1])
redis.call('HSET', p, 'state', 'open', 'keep', ARGV[2], 'opened_at', string.format('%.6f', now))
for i = 3, #ARGV, 2 do
  redis.call('HSET', p, ARGV[i], ARGV[i + 1])
end
fj_batch_expire(p, FJ_BATCH_KEEP_OPEN)
return fj_batch_settle(p, now)
