--! use slots, exit
-- Take a slot of a key for a fetched job, or park the job in the key's lock-wait
-- list (leaving the in-progress record, and its tenant's running count on a
-- sharded queue), where it holds no worker until a slot frees.
-- KEYS[1..4] = limit, holders, reserved, waiters; KEYS[5] = in-progress hash;
--   KEYS[6] = limits registry set; KEYS[7] = this worker's slot record (token -> key);
--   for a sharded job KEYS[8..20] = the shard state (ShardKeys::state()).
-- ARGV[1] = default limit, ARGV[2] = holder id, ARGV[3] = jid, ARGV[4] = token,
--   ARGV[5] = waiter entry, ARGV[6] = registry member, ARGV[7] = slot record value,
--   ARGV[8] = '' or shard prefix, ARGV[9] = encoded tenant.
-- Returns 1 (slot taken), 0 (parked) or -1 (the job is no longer this worker's).
local lk = slot_keys(1, false)
redis.call('SADD', KEYS[6], ARGV[6])
if slot_try_take(lk, ARGV[1], ARGV[2], ARGV[3]) then
  redis.call('HSET', KEYS[7], ARGV[4], ARGV[7])
  return 1
end
if not fj_park_leave(KEYS[5], ARGV[4], 8, ARGV[8], ARGV[9]) then return -1 end
redis.call('RPUSH', lk.waiters, ARGV[5])
return 0
