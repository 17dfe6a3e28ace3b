-- Renew a worker's lease. PEXPIRE first, which Redis allows even when it is out
-- of memory, so heartbeats keep working while the backlog drains; only a lease
-- that had already expired is written anew. Returns 1 when it had expired.
-- KEYS[1] = lease key. ARGV[1] = lease ms, ARGV[2] = identity.
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return 1
