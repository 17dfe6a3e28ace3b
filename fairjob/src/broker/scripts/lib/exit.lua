--! use dispatch/reserve
-- A job's exit from its worker's in-progress record when one of its gates
-- parks it (the Lua side of the worker's one exit, worker/exit.rs `admit`):
-- the record's entry goes, fenced by its token, and for a job of a
-- tenant-sharded queue its tenant's running count with it (the shard's state
-- keys from KEYS[first], `shard_prefix` its lists' prefix, '' for a plain queue).
-- False when the entry was gone (the job was recovered meanwhile).
local function fj_park_leave(record, token, first, shard_prefix, tenant)
  if redis.call('HDEL', record, token) == 0 then return false end
  if shard_prefix ~= '' then shard_release(shard_keys(first, shard_prefix), tenant) end
  return true
end
