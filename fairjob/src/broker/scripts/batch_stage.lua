--! use batch
-- Stages members of a batch being built (`Batch::commit`, in chunks): each
-- becomes a member (pending, unsucceeded) and waits, with its payload, in the
-- batch's staged set. Nothing is runnable until `batch_commit.lua` flips the
-- batch open; until then every key expires after ARGV[2] seconds, so a
-- creator that dies before its commit leaves nothing behind.
-- KEYS[1] = the batch's hash (its other keys share its hash tag).
-- ARGV[1] = now (seconds, the staged score), ARGV[2] = staging ttl seconds,
-- ARGV[3] = description, ARGV[4] = tenant, then (jid, payload) pairs.
-- Returns 1, or 0 when the batch is no longer staging (committed already).
local p = KEYS[1]
local state = redis.call('HGET', p, 'state')
if state and state ~= 'staging' then return 0 end
if not state then
  redis.call('HSET', p, 'state', 'staging', 'created_at', ARGV[1], 'total', 0,
    'desc', ARGV[3], 'tenant', ARGV[4])
end
local jids, payloads = {}, {}
for i = 5, #ARGV, 2 do
  jids[#jids + 1] = ARGV[i]
  payloads[#payloads + 1] = ARGV[i + 1]
end
fj_batch_add_many(p, jids, payloads, tonumber(ARGV[1]))
fj_batch_expire(p, tonumber(ARGV[2]))
return 1
