--! use dispatch/order
-- The per-call cache of the dispatch scripts (no twin: the model in
-- fairjob::policy::dispatch has none, and tests/tests/twins.rs shows the
-- cache changes nothing it can see): running counts read ahead and written
-- once per call (shard_prefetch, shard_counts_flush), and the head of the
-- dispatch order read ahead (shard_win_head). A script that dispatches or
-- defers counts ends with shard_flush, which writes the passes, the counts
-- and vt back: a handful of commands per call, not per job.

-- Writes the deferred running counts (one HSET, one HDEL for those at 0).
local function shard_counts_flush(sk)
  local set, del = {}, {}
  for t in pairs(shard_memo.dirty) do
    local r = shard_memo.counts[t]
    if r > 0 then
      set[#set + 1] = t
      set[#set + 1] = string.format('%d', r)
    else
      del[#del + 1] = t
    end
  end
  if #set > 0 then
    set[#set + 1] = SHARD_RUNNING_MARK
    set[#set + 1] = '0'
    fj_hset(sk.running, set)
  end
  if #del > 0 then
    fj_hdel(sk.running, del)
    shard_running_tidy(sk)
  end
  shard_memo.dirty = {}
end

-- Reads ahead, in one HMGET each, the running counts of `ts` (tenants) not
-- known yet, and when `members` is true their rmember entries.
local function shard_prefetch(sk, ts, members)
  local need = {}
  for _, t in ipairs(ts) do
    if shard_memo.counts[t] == nil then need[#need + 1] = t end
  end
  if #need > 0 then
    local v = fj_hmget(sk.running, need)
    for i, t in ipairs(need) do shard_memo.counts[t] = tonumber(v[i] or '0') end
  end
  if members then
    local v = fj_hmget(sk.rmember, ts)
    for i, t in ipairs(ts) do shard_memo.members[t] = v[i] end
  end
end
-- Writes the passes of the read-ahead window (shard_win_head) to `ready`
-- and forgets the window.
local function shard_win_flush(sk)
  local pend = shard_memo.pend
  if pend then
    local args = {}
    for m, pass in pairs(pend) do
      args[#args + 1] = fj_num(pass)
      args[#args + 1] = m
    end
    -- XX: a member taken out of the order meanwhile stays out.
    if #args > 0 then redis.call('ZADD', sk.ready, 'XX', unpack(args)) end
  end
  shard_memo.pend = nil
  shard_memo.win = nil
end

-- Writes the order's passes and vt back and trims the passes vt overtook;
-- dispatching scripts end with it.
local function shard_flush(sk)
  shard_win_flush(sk)
  shard_counts_flush(sk)
  if shard_memo.clock_dirty then
    redis.call('SET', sk.vt, fj_num(shard_memo.clock))
    redis.call('ZREMRANGEBYSCORE', sk.lastpass, '-inf', fj_num(shard_memo.clock))
    shard_memo.clock_dirty = false
  end
end

-- The head of the dispatch order (an entry { m, pass }), read ahead:
-- one ZRANGE reads the first `want` + 1 entries of `ready` (the window), a
-- dispatch that keeps its tenant in the order records the new pass in
-- `pend` and puts the entry back into the window at its place, when that
-- place is known (before the window's last entry, or the window holds all of
-- `ready`); else it leaves the window, which still holds the true first
-- entries of the order. The passes are written with one ZADD when the window
-- runs out (then it is read again) and at the end of the call
-- (shard_flush). Any other change to `ready` first flushes (shard_win_flush).
-- nil when the order is empty.
local function shard_win_head(sk, want)
  local w = shard_memo.win
  if w == nil or #w == 0 then
    shard_win_flush(sk)
    local k = math.max(1, want) + 1
    local r = redis.call('ZRANGE', sk.ready, 0, k - 1, 'WITHSCORES')
    w = {}
    for i = 1, #r, 2 do
      w[#w + 1] = { m = r[i], pass = tonumber(r[i + 1]) }
    end
    shard_memo.win = w
    shard_memo.win_all = #w < k
    shard_memo.pend = {}
    local ts = {}
    for i, e in ipairs(w) do ts[i] = string.sub(e.m, 16) end
    shard_prefetch(sk, ts, false)
  end
  return w[1]
end

-- The head `e` was dispatched and stays in the order at `pass`.
local function shard_win_advance(e, pass)
  local w = shard_memo.win
  table.remove(w, 1)
  shard_memo.pend[e.m] = pass
  e.pass = pass
  local n = #w
  if not shard_memo.win_all and (n == 0 or not shard_before(e, w[n])) then return end
  local i = n + 1
  while i > 1 and shard_before(e, w[i - 1]) do i = i - 1 end
  table.insert(w, i, e)
end

-- The head `e` leaves the order (at its cap, waiting for its rate, drained):
-- the window without it is still the order's first entries. Nothing for a
-- head served from `floorq` (e nil: the window was written and forgotten).
local function shard_win_drop(e)
  if not e then return end
  table.remove(shard_memo.win, 1)
  shard_memo.pend[e.m] = nil
end

