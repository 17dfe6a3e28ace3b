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
  if shard_memo.order_left then
    shard_memo.order_left = false
    shard_order_tidy(sk, true)
  end
  if shard_memo.clock_dirty then
    redis.call('SET', sk.vt, fj_num(shard_memo.clock))
    redis.call('ZREMRANGEBYSCORE', sk.lastpass, '-inf', fj_num(shard_memo.clock))
    shard_memo.clock_dirty = false
  end
end

-- The head of the dispatch order, read ahead: its member, pass and tenant,
-- or nil when the order is empty. One ZRANGE reads the first `want` + 1
-- entries of `ready` (the window: three arrays, member `m`, pass `p`, tenant
-- `t`, its head at `i`, its last entry at `n`); a dispatch that keeps its
-- tenant in the order records the new pass in `pend` and puts the entry back
-- into the window at its place, when that place is known (before the
-- window's last entry, or the window holds all of `ready`); else it leaves
-- the window, which still holds the true first entries of the order. The
-- passes are written with one ZADD when the window runs out (then it is read
-- again) and at the end of the call (shard_flush). Any other change to
-- `ready` first flushes (shard_win_flush).
local function shard_win_head(sk, want)
  local w = shard_memo.win
  if w == nil or w.i > w.n then
    shard_win_flush(sk)
    local k = math.max(1, want) + 1
    local r = redis.call('ZRANGE', sk.ready, 0, k - 1, 'WITHSCORES')
    local wm, wp, wt = {}, {}, {}
    local n = #r / 2
    local all = n < k
    for j = 1, n do
      local m = r[2 * j - 1]
      -- The mark is last: the window holds the whole order.
      if m == SHARD_READY_MARK then
        n = j - 1
        all = true
        break
      end
      wm[j] = m
      wp[j] = tonumber(r[2 * j])
      wt[j] = string.sub(m, 16)
    end
    w = { m = wm, p = wp, t = wt, i = 1, n = n, all = all }
    shard_memo.win = w
    shard_memo.pend = {}
    shard_prefetch(sk, wt, false)
    if n == 0 then return nil end
  end
  local i = w.i
  return w.m[i], w.p[i], w.t[i]
end

-- The head (member `m`, tenant `t`) was dispatched and stays in the order at `pass`.
local function shard_win_advance(m, t, pass)
  local w = shard_memo.win
  local wm, wp, wt = w.m, w.p, w.t
  local first, n = w.i + 1, w.n
  shard_memo.pend[m] = pass
  -- Its place is not known: it leaves the window.
  if not w.all and (n < first or not shard_before(pass, m, wp[n], wm[n])) then
    w.i = first
    return
  end
  -- Shifts the entries before which it goes one place towards the head.
  local j = first - 1
  while j < n and shard_before(wp[j + 1], wm[j + 1], pass, m) do
    wm[j], wp[j], wt[j] = wm[j + 1], wp[j + 1], wt[j + 1]
    j = j + 1
  end
  wm[j], wp[j], wt[j] = m, pass, t
  w.i = first - 1
end

-- The head leaves the order (at its cap, waiting for its rate, drained):
-- the window without it is still the order's first entries. Nothing for a
-- head served from `floorq` (m nil: the window was written and forgotten).
local function shard_win_drop(m)
  if not m then return end
  local w = shard_memo.win
  w.i = w.i + 1
  shard_memo.pend[m] = nil
end
