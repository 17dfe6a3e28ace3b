--! use dispatch/reserve
-- Reserve up to n jobs of one tenant-sharded queue: move a bounded part of its
-- inbox (jobs pushed by producers that know nothing of shards) into tenant
-- shards, then dispatch each job in fair-share order (lib/dispatch/reserve.lua), moving it
-- into this worker's in-progress record of the queue under a fresh token.
-- Every key is in the queue's slot.
--
-- Tenants whose rate allows a start again come back into the order first
-- (a bounded number per call).
--
-- KEYS[1] = inbox, KEYS[2..14] = the shard state (ShardKeys::state()),
--   KEYS[15] = in-progress hash,
--   KEYS[16] = the queue's fetchers (workers that may hold in-progress records),
--   KEYS[17] = fair yield's waiting tenants, KEYS[18] = their slot waits
--   (a tenant seen waiting that gets a slot: how long it waited).
-- (The per-minute dispatch counts are the worker's: it counts the jobs it
-- gets and writes them with its heartbeat, worker/stats.rs.)
-- ARGV[1] = n, ARGV[2] = first token sequence number,
--   ARGV[3] = token suffix ('|<encoded queue>'), ARGV[4] = shard prefix,
--   ARGV[5] = inbox entries to move at most, ARGV[6] = this worker's identity.
-- ARGV[7] = tenants waiting for their rate to bring back at most.
-- ARGV[8] = '1' when the call carries acks, then (token, encoded tenant, '')
--   triples: this worker's jobs of the queue that ended well, acked first as
--   shard_ack_many.lua does (one round trip per sharded job: a tenant's
--   running count is released in the step that refills the worker's slot, so
--   floors and caps see exact counts); KEYS[19] = the queue's wake list.
-- Returns a flat list: token, payload, ...; when it reserved fewer than n and
-- a tenant waits for its rate, one more element: the µs until the first such
-- tenant's rate allows a start (an idle worker waits no longer than that).
-- With acks, the list starts with one more element: the 1-based positions of
-- the fenced acks (a list, empty when none was).

local sk = shard_keys(2, ARGV[4])
shard_memo.policy_whole = true
shard_memo.defer_counts = true
local after = 1 + SHARD_NKEYS
local inflight = KEYS[after + 1]
local n, seq = tonumber(ARGV[1]), tonumber(ARGV[2])
local acking = ARGV[8] == '1'
local fenced, wake = {}, false
if acking then
  fenced, wake = shard_ack_list(sk, inflight, ARGV, 9)
end
shard_drain_inbox(sk, KEYS[1], tonumber(ARGV[5]))
shard_rate_wake(sk, tonumber(ARGV[7]))
local any_waiting = redis.call('EXISTS', KEYS[after + 3]) == 1
local out = {}
for i = 1, n do
  local t, job = shard_reserve(sk, n - i + 1)
  if not job then break end
  if any_waiting then
    local since = redis.call('HGET', KEYS[after + 3], t)
    if since then
      redis.call('HDEL', KEYS[after + 3], t)
      redis.call('LPUSH', KEYS[after + 4], fj_num(math.max(0, redis_now() - tonumber(since))))
      redis.call('LTRIM', KEYS[after + 4], 0, 255)
    end
  end
  local token = seq .. ARGV[3] .. '|' .. t
  out[#out + 1] = token
  out[#out + 1] = job
  seq = seq + 1
end
shard_flush(sk)
-- A release that put a tenant back in the order wakes an idle worker when
-- this one took all it asked for (when it took fewer, nothing is left).
if wake and #out == 2 * n then
  fj_wake(KEYS[after + 5])
end
if #out > 0 then
  -- The records in one HSET.
  fj_hset(inflight, out)
  -- Listed before it holds a job here, in the same step: the reconciler
  -- counts running jobs from the records of every listed fetcher.
  redis.call('SADD', KEYS[after + 2], ARGV[6])
end
if #out < 2 * n and shard_rwait_any(sk) then
  local first = redis.call('ZRANGE', sk.rwait, 0, 0, 'WITHSCORES')
  if #first > 0 then
    out[#out + 1] = math.max(0, tonumber(first[2]) - fj_now_us())
  end
end
if acking then table.insert(out, 1, fenced) end
return out
