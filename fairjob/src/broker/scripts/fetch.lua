-- Reserve up to n jobs, each from the first non-empty queue of its own weighted
-- permutation (computed by the worker, as Sidekiq's BasicFetch does per BRPOP),
-- moving each atomically into the worker's in-progress record under a fresh
-- token. Sharded queues first move their inbox into tenant shards, then pick
-- the next tenant in round-robin order.
--
-- KEYS[1] = in-progress hash; then per queue: kind 'p': [list];
--   kind 's': [inbox, ring, seq, running, limits, tenants]
-- ARGV[1] = n, ARGV[2] = queue count, ARGV[3] = first token sequence number,
--   then per queue: kind, token suffix ('|<encoded queue>'), and for 's' the shard prefix;
--   then n permutations of queue indices (queue count each).
-- Returns a flat list: queue index, token, payload, ...

local inflight = KEYS[1]
local n, nq, seq = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local qs = {}
local ki, ai = 2, 4
for j = 1, nq do
  local q = { kind = ARGV[ai], suffix = ARGV[ai + 1] }
  ai = ai + 2
  if q.kind == 'p' then
    q.list = KEYS[ki]; ki = ki + 1
  else
    q.inbox = KEYS[ki]
    q.sk = { ring = KEYS[ki + 1], seq = KEYS[ki + 2], running = KEYS[ki + 3], limits = KEYS[ki + 4],
             tenants = KEYS[ki + 5], prefix = ARGV[ai] }
    ki = ki + 6; ai = ai + 1
  end
  qs[j] = q
end

local out = {}
for i = 1, n do
  local got = false
  for j = 1, nq do
    local idx = tonumber(ARGV[ai + (i - 1) * nq + (j - 1)])
    local q = qs[idx]
    local job, token
    if q.kind == 'p' then
      job = redis.call('RPOP', q.list)
      if job then token = seq .. q.suffix end
    elseif not q.empty then
      if not q.drained then
        shard_drain_inbox(q.sk, q.inbox, 1000)
        q.drained = true
      end
      local t
      t, job = shard_reserve(q.sk)
      if job then token = seq .. q.suffix .. '|' .. t else q.empty = true end
    end
    if job then
      redis.call('HSET', inflight, token, job)
      out[#out + 1] = idx
      out[#out + 1] = token
      out[#out + 1] = job
      seq = seq + 1
      got = true
      break
    end
  end
  if not got then break end
end
return out
