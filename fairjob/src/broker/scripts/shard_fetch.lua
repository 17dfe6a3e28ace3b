-- Reserve up to n jobs of one tenant-sharded queue: move a bounded part of its
-- inbox (jobs pushed by producers that know nothing of shards) into tenant
-- shards, then dispatch each job in fair-share order (lib_shard.lua), moving it
-- into this worker's in-progress record of the queue under a fresh token.
-- Every key is in the queue's slot.
--
-- KEYS[1] = inbox, KEYS[2..12] = the shard state (ShardKeys::state()),
--   KEYS[13] = in-progress hash, KEYS[14] = this minute's dispatch counts,
--   KEYS[15] = the queue's fetchers (workers that may hold in-progress records),
--   KEYS[16] = fair yield's waiting tenants, KEYS[17] = their slot waits
--   (a tenant seen waiting that gets a slot: how long it waited).
-- ARGV[1] = n, ARGV[2] = first token sequence number,
--   ARGV[3] = token suffix ('|<encoded queue>'), ARGV[4] = shard prefix,
--   ARGV[5] = inbox entries to move at most, ARGV[6] = this worker's identity.
-- Returns a flat list: token, payload, ...

local sk = shard_keys(2, ARGV[4])
local inflight, served_key = KEYS[13], KEYS[14]
local n, seq = tonumber(ARGV[1]), tonumber(ARGV[2])
shard_drain_inbox(sk, KEYS[1], tonumber(ARGV[5]))
local out = {}
for _ = 1, n do
  local t, job = shard_reserve(sk, served_key)
  if not job then break end
  local since = redis.call('HGET', KEYS[16], t)
  if since then
    redis.call('HDEL', KEYS[16], t)
    redis.call('LPUSH', KEYS[17], fj_num(math.max(0, redis_now() - tonumber(since))))
    redis.call('LTRIM', KEYS[17], 0, 255)
  end
  local token = seq .. ARGV[3] .. '|' .. t
  redis.call('HSET', inflight, token, job)
  out[#out + 1] = token
  out[#out + 1] = job
  seq = seq + 1
end
shard_flush(sk)
if #out > 0 then
  -- Listed before it holds a job here, in the same step: the reconciler
  -- counts running jobs from the records of every listed fetcher.
  redis.call('SADD', KEYS[15], ARGV[6])
  redis.call('HINCRBY', served_key, '*', #out / 2)
  redis.call('EXPIRE', served_key, 900)
end
return out
