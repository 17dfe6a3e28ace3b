-- Enqueue a batch of jobs, all in one atomic step (jobs bound for one plain
-- queue are written with one LPUSH, in order): (optionally) take it out of
-- the promoting record, (optionally) register it in its tenant's reroute window
-- and choose its queue by the rules (the last matching rule wins), then push it
-- to a plain queue or a tenant shard and wake an idle worker.
--
-- KEYS[1] = queues set when ARGV[3] is '1' (the batch has a plain candidate;
--   a push to a sharded queue alone stays in the queue's cluster slot, and the
--   worker announces the queue); then, per job, the keys named below, in order.
-- ARGV[1] = clock offset (seconds, tests only), ARGV[2] = number of jobs,
--   ARGV[3] = '1' or '0'; per job:
--   src member ('' = none)                       [KEY: promoting zset]
--   window member 'jid:<jid>' ('' = no reroute)  [KEY: window zset]
--     max window seconds, rule count, then per rule: threshold, per seconds
--   payload before the queue value, payload after it
--   candidate count, then per candidate: queue name, queue JSON string, kind
--     kind 'p': [KEYS: list, wake]
--     kind 's': encoded tenant, shard prefix [KEYS: ring, seq, running, limits, tenants, wake]
-- Returns, per job, the 1-based index of the chosen candidate, or 0 when the
-- source entry was already gone (another poller promoted it).

local ki, ai = 1, 4
if ARGV[3] == '1' then ki = 2 end
local results = {}
local lists, list_order = {}, {}
local now = nil
for jn = 1, tonumber(ARGV[2]) do
  local src = ARGV[ai]; ai = ai + 1
  local src_key = nil
  if src ~= '' then src_key = KEYS[ki]; ki = ki + 1 end
  local member = ARGV[ai]; ai = ai + 1
  local wkey, maxw, rules = nil, 0, {}
  if member ~= '' then
    wkey = KEYS[ki]; ki = ki + 1
    maxw = tonumber(ARGV[ai]); local nrules = tonumber(ARGV[ai + 1]); ai = ai + 2
    for r = 1, nrules do
      rules[r] = { tonumber(ARGV[ai]), tonumber(ARGV[ai + 1]) }; ai = ai + 2
    end
  end
  local before, after = ARGV[ai], ARGV[ai + 1]; ai = ai + 2
  local cands = {}
  local ncand = tonumber(ARGV[ai]); ai = ai + 1
  for c = 1, ncand do
    local cand = { name = ARGV[ai], qjson = ARGV[ai + 1], kind = ARGV[ai + 2] }
    ai = ai + 3
    if cand.kind == 'p' then
      cand.list_ki = ki; cand.wake_ki = ki + 1; ki = ki + 2
    else
      cand.t = ARGV[ai]
      cand.sk = { ring = KEYS[ki], seq = KEYS[ki + 1], running = KEYS[ki + 2], limits = KEYS[ki + 3],
                  tenants = KEYS[ki + 4], prefix = ARGV[ai + 1] }
      cand.wake = KEYS[ki + 5]
      ki = ki + 6; ai = ai + 2
    end
    cands[c] = cand
  end

  if src_key and redis.call('ZREM', src_key, src) == 0 then
    results[jn] = 0
  else
    local chosen = 1
    if wkey then
      if not now then now = math.floor(redis_now(ARGV[1])) end
      redis.call('ZADD', wkey, now, member)
      redis.call('ZREMRANGEBYSCORE', wkey, '-inf', '(' .. (now - maxw))
      redis.call('EXPIRE', wkey, maxw)
      for r = 1, #rules do
        local count = redis.call('ZCOUNT', wkey, now - rules[r][2], '+inf')
        if rules[r][1] < count then chosen = r + 1 end
      end
    end
    local cand = cands[chosen]
    local payload = before .. cand.qjson .. after
    if cand.kind == 'p' then
      -- Plain queues are written once per batch, below (one LPUSH per list).
      local l = lists[KEYS[cand.list_ki]]
      if not l then
        l = { name = cand.name, list_ki = cand.list_ki, wake_ki = cand.wake_ki, items = {} }
        lists[KEYS[cand.list_ki]] = l
        list_order[#list_order + 1] = l
      end
      l.items[#l.items + 1] = payload
    else
      shard_push(cand.sk, cand.t, payload, false)
      redis.call('LPUSH', cand.wake, '1')
      redis.call('LTRIM', cand.wake, 0, 0)
    end
    results[jn] = chosen
  end
end
-- Each list is written through the KEYS entry of its first job.
for _, l in ipairs(list_order) do
  redis.call('SADD', KEYS[1], l.name)
  for i = 1, #l.items, 500 do
    redis.call('LPUSH', KEYS[l.list_ki], unpack(l.items, i, math.min(i + 499, #l.items)))
  end
  redis.call('LPUSH', KEYS[l.wake_ki], '1')
  redis.call('LTRIM', KEYS[l.wake_ki], 0, 0)
end
return results
