--! use unique
-- Push unique jobs (on_conflict = reject) with nothing else to decide to one
-- plain queue: per job, take its lock (as push.lua does) and, when taken,
-- push it; one LPUSH for the batch, then register the queue and wake a
-- worker. The lean form of push.lua for the common case: it carries only
-- lib/unique.lua, so a call costs a few Redis commands, not the general
-- script's set-up.
-- KEYS[1] = queues set, KEYS[2] = the queue's list, KEYS[3] = its wake list,
--   then one lock per job.
-- ARGV[1] = the queue's name, then per job: payload, jid, lock ttl ms.
-- Returns, per job, 1 when pushed or {'d', holder jid} when its key is held.
local out = {}
local items = {}
local ai = 2
for jn = 1, #KEYS - 3 do
  local payload, jid, ttl = ARGV[ai], ARGV[ai + 1], tonumber(ARGV[ai + 2])
  ai = ai + 3
  local holder = unique_take({ prefix = KEYS[3 + jn] }, '', jid, ttl)
  if holder then
    out[jn] = { 'd', holder }
  else
    items[#items + 1] = payload
    out[jn] = 1
  end
end
if #items > 0 then
  for i = 1, #items, 500 do
    redis.call('LPUSH', KEYS[2], unpack(items, i, math.min(i + 499, #items)))
  end
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('LPUSH', KEYS[3], '1')
  redis.call('LTRIM', KEYS[3], 0, 0)
end
return out
