--! use slots
-- Release the slot a finished job held, after its finish ran in its queue's
-- slot (a job of a tenant-sharded queue, or any job in Redis Cluster mode; see
-- slot_release in lib/slots.lua).
-- KEYS[1..4] = limit, holders, reserved, waiters; KEYS[5] = the worker's slot
--   record, or in cluster mode ('c') the releasing set (the caller forgets
--   the record itself).
-- ARGV[1] = holder id, ARGV[2] = default limit, ARGV[3] = reservation ttl ms,
--   ARGV[4], ARGV[5] = queue and wake key prefixes, ARGV[6] = the job's token,
--   ARGV[7] = 'c' in cluster mode.
-- Returns how many waiters were released or, in cluster mode, the released
-- waiter entries (staged in the releasing set) for the caller to deliver.
if ARGV[7] == 'c' then
  local lk = slot_keys(1, true)
  if redis.call('ZREM', lk.holders, ARGV[1]) == 1 then
    slot_release_waiters(lk, ARGV[2], ARGV[3], fj_now_ms(), nil, nil)
  end
  return lk.out
end
local lk = slot_keys(1, false)
return slot_release(lk, KEYS[5], ARGV[6], ARGV[1], ARGV[2], ARGV[3], { prefix = ARGV[4] }, { prefix = ARGV[5] })
