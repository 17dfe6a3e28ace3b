-- Save an iterable job's cursor, fenced: only the run holding the fence `f`
-- of `it-{jid}` (see iterate_claim.lua) writes.
-- KEYS[1] = it-{jid}. ARGV[1] = the run's fence value, ARGV[2] = cursor JSON, ARGV[3] = runtime
-- seconds to add, ARGV[4] = expiry seconds, ARGV[5] = 'end' to remove the
-- state (the job is complete) instead, ARGV[6] = steps since the last save,
-- ARGV[7] = '1' when the run yields, ARGV[8] = now (epoch seconds). Besides
-- Sidekiq's fields it keeps fairjob's `s` (steps done), `at` (last checkpoint)
-- and `y` (yields), for the views; Sidekiq ignores them.
-- Returns 0 when fenced, 1 when saved, 2 when saved and the job is cancelled.
if redis.call('HGET', KEYS[1], 'f') ~= ARGV[1] then return 0 end
if ARGV[5] == 'end' then
  redis.call('UNLINK', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'c', ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[1], 'rt', ARGV[3])
redis.call('HINCRBY', KEYS[1], 's', ARGV[6])
redis.call('HSET', KEYS[1], 'at', ARGV[8])
if ARGV[7] == '1' then redis.call('HINCRBY', KEYS[1], 'y', 1) end
redis.call('EXPIRE', KEYS[1], ARGV[4])
if redis.call('HEXISTS', KEYS[1], 'cancelled') == 1 then return 2 end
return 1
