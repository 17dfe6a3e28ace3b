-- The fair_tenant gem's sliding window: a job registers in its class and
-- tenant's window (a sorted set of `jid:<jid>` by enqueue second) and is
-- judged by its rules in order, the last one whose threshold the count in its
-- period exceeds winning. Returns the 1-based candidate: 1 = the job's own
-- queue, r + 1 = rule r's queue.
local function window_choose(wkey, now, member, maxw, rules)
  redis.call('ZADD', wkey, now, member)
  redis.call('ZREMRANGEBYSCORE', wkey, '-inf', '(' .. (now - maxw))
  redis.call('EXPIRE', wkey, maxw)
  local chosen = 1
  for r = 1, #rules do
    local count = redis.call('ZCOUNT', wkey, now - rules[r][2], '+inf')
    if rules[r][1] < count then chosen = r + 1 end
  end
  return chosen
end
