--! use slots
-- Drop a slot holder whose job is gone from its worker's in-progress record
-- (Redis lost the write that freed it), and release as many waiters as that
-- frees. The caller checked the record first; a token never comes back, so
-- the check and this step need not be atomic.
-- KEYS[1..4] = limit, holders, reserved, waiters; in cluster mode KEYS[5] =
--   the releasing set.
-- ARGV[1] = holder id, ARGV[2] = default limit, ARGV[3] = reservation ttl ms,
--   ARGV[4], ARGV[5] = queue and wake key prefixes, ARGV[6] = 'c' in cluster mode.
-- Returns how many waiters were released or, in cluster mode, the released
-- entries (see slot_release.lua); -1 when the holder was gone.
local staged = ARGV[6] == 'c'
local lk = slot_keys(1, staged)
if redis.call('ZREM', lk.holders, ARGV[1]) == 0 then return -1 end
if staged then
  slot_release_waiters(lk, ARGV[2], ARGV[3], fj_now_ms(), nil, nil)
  return lk.out
end
return slot_release_waiters(lk, ARGV[2], ARGV[3], fj_now_ms(), { prefix = ARGV[4] }, { prefix = ARGV[5] })
