-- Reroute (the twin of fairjob::policy::reroute): the fair_tenant gem's sliding window: a job registers in its class and
-- tenant's window (a sorted set of `jid:<jid>` by enqueue second) and is
-- judged by its rules in order, the last one whose threshold the count in its
-- period exceeds winning. Returns the 1-based candidate: 1 = the job's own
-- queue, r + 1 = rule r's queue.
--
-- `seen` is the calling script's table of the windows it has judged in this
-- call (one `now`, so counts only grow): a window's first job trims it,
-- refreshes its expiry and counts each distinct period once; a later new
-- member of the same window (ZADD added it, with score `now`, inside every
-- period) adds one to each count it keeps, with no further command. A member
-- that was already there (ZADD moved it), a different longest window or a
-- period not counted yet is counted afresh, so the choice is always the one
-- a lone call would make.
local function window_choose(wkey, now, member, maxw, rules, seen)
  local w = seen[wkey]
  local added = redis.call('ZADD', wkey, now, member)
  if w == nil or w.maxw ~= maxw then
    redis.call('ZREMRANGEBYSCORE', wkey, '-inf', '(' .. (now - maxw))
    redis.call('EXPIRE', wkey, maxw)
    w = { maxw = maxw, counts = {} }
    seen[wkey] = w
  elseif added == 1 then
    for per, n in pairs(w.counts) do w.counts[per] = n + 1 end
  else
    w.counts = {}
  end
  local chosen = 1
  for r = 1, #rules do
    local per = rules[r][2]
    local count = w.counts[per]
    if count == nil then
      count = redis.call('ZCOUNT', wkey, now - per, '+inf')
      w.counts[per] = count
    end
    if rules[r][1] < count then chosen = r + 1 end
  end
  return chosen
end
