-- Release the slot a finished job held (a job of a tenant-sharded queue, whose
-- own finish ran in the queue's slot first): forget it in the worker's slot
-- record and, if it was still a holder, move waiters into the freed slots.
-- KEYS[1..4] = limit, holders, reserved, waiters; KEYS[5] = the worker's slot record.
-- ARGV[1] = token, ARGV[2] = holder id, ARGV[3] = default limit,
--   ARGV[4] = reservation ttl ms, ARGV[5], ARGV[6] = queue and wake key prefixes.
-- Returns how many waiters were released.
local lk = { limit = KEYS[1], holders = KEYS[2], reserved = KEYS[3], waiters = KEYS[4] }
redis.call('HDEL', KEYS[5], ARGV[1])
if redis.call('ZREM', lk.holders, ARGV[2]) == 1 then
  return slot_release_waiters(lk, ARGV[3], ARGV[4], slot_now_ms(), { prefix = ARGV[5] }, { prefix = ARGV[6] })
end
return 0
