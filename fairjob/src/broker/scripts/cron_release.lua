-- The run of a schedule with `overlap = "skip"` ended (success or dead):
-- forget it as the schedule's live run, if it still is.
-- KEYS[1] = the schedule's state hash. ARGV[1] = the job's jid.
if redis.call('HGET', KEYS[1], 'active') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'active')
  return 1
end
return 0
