-- Reserve up to n jobs from plain queues, each from the first non-empty queue
-- of its own weighted order (computed by the worker, as Sidekiq's BasicFetch
-- does per BRPOP), moving each atomically into the worker's in-progress record
-- under a fresh token. An order here is the run of plain queues up to the next
-- sharded queue in the worker's full order: the worker asks the sharded queue
-- (shard_fetch.lua) for the orders this call could not serve.
--
-- KEYS[1] = in-progress hash; KEYS[1 + j] = list of plain queue j.
-- ARGV[1] = n, ARGV[2] = queue count, ARGV[3] = first token sequence number,
--   ARGV[3 + j] = token suffix of queue j ('|<encoded queue>');
--   then n orders, each a length and that many queue indices.
-- Returns a flat list: order index, token, payload, ... (orders not served are
-- those whose queues were all empty).

local inflight = KEYS[1]
local n, nq, seq = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local empty = {}
local out = {}
local ai = 4 + nq
for i = 1, n do
  local len = tonumber(ARGV[ai]); ai = ai + 1
  for p = 0, len - 1 do
    local j = tonumber(ARGV[ai + p])
    if not empty[j] then
      local job = redis.call('RPOP', KEYS[1 + j])
      if job then
        local token = seq .. ARGV[3 + j]
        redis.call('HSET', inflight, token, job)
        out[#out + 1] = i
        out[#out + 1] = token
        out[#out + 1] = job
        seq = seq + 1
        break
      end
      empty[j] = true
    end
  end
  ai = ai + len
end
return out
