-- Ack several jobs of one tenant-sharded queue held in one in-progress record,
-- in one step, each fenced by its own token (a batch of the worker's acks; see
-- worker/acks.rs): as shard_finish.lua's 'done' for each, releasing its
-- tenant's running count, and one wake-up if that made a tenant runnable.
--
-- KEYS[1] = in-progress hash, KEYS[2..14] = the shard state, KEYS[15] = wake.
-- ARGV[1] = shard prefix, then (token, encoded tenant) pairs.
-- Returns the 1-based positions of the pairs whose token was gone (fenced: the
-- job had been recovered from this worker; its count was released then).

local sk = shard_keys(2, ARGV[1])
local fenced = {}
local wake = false
local n = 0
for i = 2, #ARGV - 1, 2 do
  n = n + 1
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 0 then
    fenced[#fenced + 1] = n
  elseif shard_release(sk, ARGV[i + 1]) then
    wake = true
  end
end
if wake then
  fj_wake(KEYS[2 + SHARD_NKEYS])
end
return fenced
