--! use slots
-- Set a key's slot limit at runtime (empty = back to the declared default) and
-- release as many waiters as there are free slots at once (0 pauses the key).
-- KEYS[1..4] = limit, holders, reserved, waiters; KEYS[5] = limits registry
--   set, or in cluster mode ('c') the releasing set (the caller registers).
-- ARGV[1] = limit or '', ARGV[2] = default limit (for ''), ARGV[3] = reservation
-- ttl ms, ARGV[4] = registry member, ARGV[5], ARGV[6] = queue and wake key
-- prefixes, ARGV[7] = 'c' in cluster mode. Returns how many waiters were
-- released or, in cluster mode, the released entries (see slot_release.lua).
local staged = ARGV[7] == 'c'
local lk = slot_keys(1, staged)
if ARGV[1] == '' then
  redis.call('DEL', lk.limit)
else
  redis.call('SET', lk.limit, ARGV[1])
end
if staged then
  slot_release_waiters(lk, ARGV[2], ARGV[3], fj_now_ms(), nil, nil)
  return lk.out
end
redis.call('SADD', KEYS[5], ARGV[4])
return slot_release_waiters(lk, ARGV[2], ARGV[3], fj_now_ms(), { prefix = ARGV[5] }, { prefix = ARGV[6] })
