--! use slots
-- Redis Cluster mode's slot acquisition: take a slot of a key for a fetched
-- job, or park the job in the key's lock-wait list; every key is in the
-- limit's slot. The caller wrote the worker's slot record before (a crash
-- leaves no slot held that the reaper can't find) and, for a parked job, takes
-- it out of its in-progress record after: the park is the commit point, so a
-- crash between the two runs the job twice, never loses it.
-- KEYS[1..4] = limit, holders, reserved, waiters.
-- ARGV[1] = default limit, ARGV[2] = holder id, ARGV[3] = jid, ARGV[4] = waiter entry.
-- Returns 1 (slot taken) or 0 (parked).
local lk = slot_keys(1, false)
if slot_try_take(lk, ARGV[1], ARGV[2], ARGV[3]) then return 1 end
redis.call('RPUSH', lk.waiters, ARGV[4])
return 0
