-- Release the slot a finished job held (a job of a tenant-sharded queue, whose
-- own finish ran in the queue's slot first; see slot_release in lib_slot.lua).
-- KEYS[1..5] = limit, holders, reserved, waiters, the worker's slot record.
-- ARGV[1] = holder id, ARGV[2] = default limit, ARGV[3] = reservation ttl ms,
--   ARGV[4], ARGV[5] = queue and wake key prefixes, ARGV[6] = the job's token.
-- Returns how many waiters were released.
local lk = { limit = KEYS[1], holders = KEYS[2], reserved = KEYS[3], waiters = KEYS[4] }
return slot_release(lk, KEYS[5], ARGV[6], ARGV[1], ARGV[2], ARGV[3], { prefix = ARGV[4] }, { prefix = ARGV[5] })
