--! use unique
-- Take a unique job's lock in a step of its own, where the job is written in
-- another (on Redis Cluster: a scheduled unique job, whose lock is in its
-- queue's slot and `schedule` in a slot of its own; a unique job rerouted to
-- a queue in another slot). The caller takes the lock first and writes the
-- job after: a crash in between leaves the lock held by a jid that was never
-- written, until its `unique_for` expires (never two jobs of one key).
-- KEYS[1] = the lock. ARGV[1] = mode, ARGV[2] = jid, ARGV[3] = the lock's ttl ms.
-- 'take': returns {'ok'} when taken (or already held by the jid), else
--   {'held', holder jid, the holder's waiting payload or ''}.
-- 'waits': ARGV[4] = payload: records where the holder `jid` waits (replace
--   mode) and restarts the lock's life; returns 1, or 0 if `jid` does not hold it.
local u = { prefix = KEYS[1] }
if ARGV[1] == 'take' then
  local holder = unique_take(u, '', ARGV[2], tonumber(ARGV[3]))
  if not holder then return { 'ok' } end
  return { 'held', holder, unique_waiting(u, '') or '' }
end
if redis.call('HGET', KEYS[1], 'j') ~= ARGV[2] then return 0 end
unique_waits_as(u, '', ARGV[4])
unique_touch(u, '', tonumber(ARGV[3]))
return 1
