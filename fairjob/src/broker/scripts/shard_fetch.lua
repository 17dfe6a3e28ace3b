-- Reserve up to n jobs of one tenant-sharded queue: move its inbox (jobs pushed
-- by producers that know nothing of shards) into tenant shards, then take each
-- job from the next tenant in round-robin order among those with pending jobs
-- and under their running limit, moving it into this worker's in-progress
-- record of the queue under a fresh token. Every key is in the queue's slot.
--
-- KEYS[1..7] = inbox, ring, seq, running, limits, tenants, in-progress hash.
-- ARGV[1] = n, ARGV[2] = first token sequence number,
--   ARGV[3] = token suffix ('|<encoded queue>'), ARGV[4] = shard prefix.
-- Returns a flat list: token, payload, ...

local sk = { ring = KEYS[2], seq = KEYS[3], running = KEYS[4], limits = KEYS[5], tenants = KEYS[6],
             prefix = ARGV[4] }
local n, seq = tonumber(ARGV[1]), tonumber(ARGV[2])
shard_drain_inbox(sk, KEYS[1], 1000)
local out = {}
for _ = 1, n do
  local t, job = shard_reserve(sk)
  if not job then break end
  local token = seq .. ARGV[3] .. '|' .. t
  redis.call('HSET', KEYS[7], token, job)
  out[#out + 1] = token
  out[#out + 1] = job
  seq = seq + 1
end
return out
