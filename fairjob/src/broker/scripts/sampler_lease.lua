-- Take or keep the metrics sampler's lease: one process at a time reads the
-- gauges that come from Redis (queue sizes, shards, slot waiters). Returns 1
-- when ARGV[1] holds the lease now (taken or renewed), 0 when another does.
-- KEYS[1] = lease key. ARGV[1] = identity, ARGV[2] = lease ms.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
