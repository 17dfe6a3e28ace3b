--! use dispatch/pace, cache
-- Dispatch on a sharded queue (the twin of fairjob::policy::dispatch::reserve):
-- a tenant's place in the order kept up to date with its jobs and settings
-- (shard_consider), pushes, releases, the inbox, and the dispatch of the next
-- job (shard_reserve).

-- Brings `t`'s place in the order up to date with its jobs and settings: in it
-- when runnable (entering at max(last pass, vt)), out of it otherwise, and in
-- `floorq` exactly while under its floor. A tenant waiting for its rate stays
-- out until its time (or until its rate is removed, or changed so that its
-- time is further away than its window of starts allows: then it is judged again at the head of
-- the order). True when `t` entered the order (the caller then wakes an idle
-- worker).
local function shard_consider(sk, t)
  local w = shard_rwait_of(sk, t)
  if w then
    local p = shard_policy_of(sk, t)
    w = tonumber(w)
    if p.rate ~= nil and w > fj_now_us() and w <= fj_now_us() + p.rate * p.rwin then return false end
    return shard_rate_unpark(sk, t)
  end
  local m = redis.call('HGET', sk.rmember, t)
  if shard_runnable(sk, t) then
    if not m then
      local last = redis.call('ZSCORE', sk.lastpass, t)
      if last then redis.call('ZREM', sk.lastpass, t) end
      shard_enready(sk, t, tonumber(last or '0'))
      return true
    end
    local floor = shard_policy_of(sk, t).floor
    if floor > 0 and shard_running(sk, t) < floor then
      redis.call('ZADD', sk.floorq, redis.call('ZSCORE', sk.ready, m), m)
      shard_memo.floor_any = true
    elseif floor > 0 or not shard_floorq_empty(sk) then
      redis.call('ZREM', sk.floorq, m)
    end
  elseif m then
    shard_remember(sk, t, shard_unready(sk, t))
  end
  return false
end

-- fairjob 0.1's structures join the fair-share order: tenants of its
-- round-robin ring (a few per call, so a rolling upgrade needs no stop), and
-- its `limits` hash (caps), copied into `policy` once.
local function shard_migrate(sk, max)
  local caps = redis.call('HGETALL', sk.limits)
  for i = 1, #caps, 2 do
    redis.call('HSETNX', sk.policy, 'c:' .. caps[i], caps[i + 1])
  end
  if #caps > 0 then redis.call('DEL', sk.limits) end
  local old = redis.call('ZRANGE', sk.ring, 0, max - 1)
  for _, t in ipairs(old) do
    redis.call('ZREM', sk.ring, t)
    shard_consider(sk, t)
  end
  return #old
end

local function shard_push(sk, t, payload, front)
  if front then
    redis.call('RPUSH', sk.prefix .. t, payload)
  else
    redis.call('LPUSH', sk.prefix .. t, payload)
  end
  redis.call('SADD', sk.tenants, t)
  return shard_consider(sk, t)
end

-- Releases one running job of `t`; true when that put `t` back in the order
-- (the caller then wakes an idle worker).
local function shard_release(sk, t)
  -- A tenant without cap, floor, rate or hold is in the order exactly while
  -- it has pending jobs (pushes, dispatches and setting changes keep it so),
  -- and its running count decides nothing: found in the order (read ahead
  -- by shard_prefetch), its release changes nothing else.
  local r = shard_add_running(sk, t, -1)
  local p = shard_policy_of(sk, t)
  if shard_memo.members[t] and p.cap == nil and p.floor == 0 and p.rate == nil
      and not p.hold_raw then
    return false
  end
  shard_memo.members[t] = nil
  local entered = shard_consider(sk, t)
  if r == 0 and redis.call('LLEN', sk.prefix .. t) == 0 then
    redis.call('SREM', sk.tenants, t)
    -- A rate state in the past can never matter again.
    shard_rate_forget(sk, t)
  end
  return entered
end

-- Acks jobs of the queue held in this worker's in-progress `record`, each
-- fenced by its token: `args` holds (token, encoded tenant, kept jid) triples
-- from position `first`. A held job leaves the record and its tenant's running
-- count is released; a kept jid ('' for none) has its end recorded for its
-- relay (`done_key`, `live_key`: given only when a triple has one). Returns
-- the 1-based positions of the triples whose token was gone (fenced: the job
-- had been recovered from this worker) and whether a release put a tenant
-- back in the order.
local function shard_ack_list(sk, record, args, first, done_key, live_key)
  local tokens = {}
  for i = first, #args - 2, 3 do tokens[#tokens + 1] = args[i] end
  if #tokens == 0 then return {}, false end
  local held = fj_hmget(record, tokens)
  -- The records still held, and their tenants.
  local gone, ts = {}, {}
  for k = 1, #tokens do
    if held[k] then
      gone[#gone + 1] = tokens[k]
      ts[#ts + 1] = args[first + 3 * (k - 1) + 1]
    end
  end
  if #gone > 0 then fj_hdel(record, gone) end
  shard_prefetch(sk, ts, true)
  local fenced, wake = {}, false
  for k = 1, #tokens do
    if not held[k] then
      fenced[#fenced + 1] = k
    else
      local i = first + 3 * (k - 1)
      if shard_release(sk, args[i + 1]) then wake = true end
      if args[i + 2] ~= '' then
        redis.call('RPUSH', done_key, 'done ' .. args[i + 2])
        redis.call('SREM', live_key, args[i + 2])
      end
    end
  end
  return fenced, wake
end

-- The tenant of an inbox entry pushed by a producer that knows nothing of
-- shards: its `fair_tenant` field, or the shared shard ('') when it has none or
-- is not JSON (the worker dead-letters malformed entries when it fetches them).
-- Also says whether the entry is a slot waiter released by a freed slot
-- (`fairjob_slot_released`), which goes to the front of its tenant's list.
local function shard_tenant_of(payload)
  local ok, job = pcall(cjson.decode, payload)
  if ok and type(job) == 'table' then
    local front = job['fairjob_slot_released'] == true
    local t = job['fair_tenant']
    if type(t) == 'string' and t ~= '' then return fj_encode(t), front end
    if type(t) == 'number' and t == math.floor(t) then return string.format('%d', t), front end
    return '', front
  end
  return '', false
end

local function shard_drain_inbox(sk, inbox, max)
  for _ = 1, max do
    local e = redis.call('RPOP', inbox)
    if not e then return end
    local t, front = shard_tenant_of(e)
    shard_push(sk, t, e, front)
  end
end

-- The head (member `m`; `win`: true when it is the window's head) leaves
-- the order at its cap or drained; `pass` is kept for when it returns.
local function shard_head_leave(sk, win, t, m, pass)
  if win then shard_win_drop(m) end
  shard_unready(sk, t, m)
  shard_remember(sk, t, pass)
end

-- shard_reserve's common case, inline (a third of a sharded job's Lua work
-- is calls and table reads): the window's head is a tenant whose settings
-- are at most a weight and a cap, below its cap after this dispatch, with a
-- job; nothing under a floor. Returns the tenant and job it dispatched, or
-- nil (then shard_reserve decides). The same steps as shard_reserve's
-- (tests/tests/twins.rs compares both with the model).
local function shard_reserve_common(sk)
  local memo = shard_memo
  if memo.floor_any ~= false or not memo.defer_counts then return nil end
  local w = memo.win
  if w == nil or w.i > w.n then return nil end
  local i = w.i
  local t = w.t[i]
  local p = shard_policy_of(sk, t)
  if p.rate ~= nil or p.hold ~= nil or p.burst ~= nil or p.floor ~= 0 then return nil end
  local r, cap = memo.counts[t], p.cap
  if r == nil or (cap ~= nil and r + 1 >= cap) then return nil end
  local list = sk.prefix .. t
  local job = redis.call('RPOP', list)
  if not job then return nil end
  local m, pass = w.m[i], w.p[i]
  memo.counts[t] = r + 1
  memo.dirty[t] = true
  shard_advance(sk, pass)
  local next_pass = shard_next_pass(pass, p)
  if redis.call('LLEN', list) > 0 then
    shard_win_advance(m, t, next_pass)
  else
    shard_head_leave(sk, true, t, m, next_pass)
  end
  return t, job
end

-- Dispatches the next job: the tenant under its floor with the smallest pass,
-- else the smallest pass of all; its oldest job; its pass advanced by
-- 1 / weight. A tenant found at its cap (lowered at runtime) leaves the order
-- until one of its jobs ends or its cap is raised; one found with its rate
-- spent waits in `rwait`, its pass kept (shard_rate_park). Bounded: never walks all
-- tenants. `want`: how many jobs the call still dispatches (the read-ahead,
-- shard_win_head). The caller counts dispatches per tenant.
local function shard_reserve(sk, want)
  local ct, cjob = shard_reserve_common(sk)
  if ct then return ct, cjob end
  for _ = 1, 32 do
    local m, pass, t
    local floored = false
    if shard_memo.floor_any ~= false then
      local top = redis.call('ZRANGE', sk.floorq, 0, 0, 'WITHSCORES')
      floored = #top > 0
      if floored then
        m, pass = top[1], tonumber(top[2])
        t = string.sub(m, 16)
      else
        shard_memo.floor_any = false
      end
    end
    if floored then
      shard_win_flush(sk)
    else
      m, pass, t = shard_win_head(sk, want)
      if m == nil then return nil end
    end
    local win = not floored
    local p = shard_policy_of(sk, t)
    -- Only a share hold or a burst makes the limit more than the cap.
    local limit = p.cap
    if p.hold ~= nil or p.burst ~= nil then limit = shard_limit(sk, t) end
    local running = shard_running(sk, t)
    local wait_until = nil
    if p.rate ~= nil and (limit == nil or running < limit) then wait_until = shard_rate_wait(sk, t, p) end
    -- Leaving the order, the head leaves the window (its pass is `pass`,
    -- also when only the window knows it).
    if limit ~= nil and running >= limit then
      shard_head_leave(sk, win, t, m, pass)
    elseif wait_until then
      if win then shard_win_drop(m) end
      shard_rate_park(sk, t, m, pass, wait_until)
    else
      local job = redis.call('RPOP', sk.prefix .. t)
      if not job then
        shard_head_leave(sk, win, t, m, pass)
      else
        running = shard_add_running(sk, t, 1)
        local wait, due = nil, nil
        if p.rate ~= nil then wait, due = shard_rate_count(sk, t, p) end
        if not floored then shard_advance(sk, pass) end
        local next_pass = shard_next_pass(pass, p)
        local more = (limit == nil or running < limit) and redis.call('LLEN', sk.prefix .. t) > 0
        if not more then
          -- Drained or at its limit: out of the order (and the window).
          shard_head_leave(sk, win, t, m, next_pass)
        elseif wait ~= nil and wait > SHARD_PARK_AFTER_US then
          -- Its rate is spent: it waits out of the order, its next pass kept.
          if win then shard_win_drop(m) end
          shard_rate_park(sk, t, m, next_pass, due)
        elseif win and p.floor == 0 then
          -- Still runnable: same member, later pass, kept in the window.
          shard_win_advance(m, t, next_pass)
        else
          -- Still runnable with a floor: its pass and its floor entry are
          -- written at once, so the window is written and read again after.
          shard_win_flush(sk)
          redis.call('ZADD', sk.ready, fj_num(next_pass), m)
          if running < p.floor then
            redis.call('ZADD', sk.floorq, fj_num(next_pass), m)
            shard_memo.floor_any = true
          elseif floored or p.floor > 0 then
            redis.call('ZREM', sk.floorq, m)
          end
        end
        return t, job
      end
    end
  end
  return nil
end
