-- Start a run of an iterable job: its state is Sidekiq's `it-{jid}` hash
-- (`ex` executions, `c` cursor JSON, `rt` runtime seconds, `cancelled`), plus
-- fairjob's fence `f`, the id of the run that may write it. The newest run
-- takes the fence; a stale run's later writes are refused.
-- KEYS[1] = it-{jid}. ARGV[1] = the run's fence value (its token and a random
--   part: tokens are unique only within one worker), ARGV[2] = expiry seconds.
-- Returns { cursor or false, runtime or false, cancelled or false, executions }.
redis.call('HSET', KEYS[1], 'f', ARGV[1])
local ex = redis.call('HINCRBY', KEYS[1], 'ex', 1)
redis.call('EXPIRE', KEYS[1], ARGV[2])
local s = redis.call('HMGET', KEYS[1], 'c', 'rt', 'cancelled')
return { s[1], s[2], s[3], ex }
