-- Release a unique job's lock: when its job starts (until = "start"), when
-- it ends where the ending script could not do it in its own step (Redis
-- Cluster, whose keys are in other slots), or by hand (`worker unique
-- unlock`).
-- KEYS[1] = the lock. ARGV[1] = the jid that must hold it ('' = whoever does).
-- Returns 1 if released.
if ARGV[1] == '' or redis.call('HGET', KEYS[1], 'j') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
