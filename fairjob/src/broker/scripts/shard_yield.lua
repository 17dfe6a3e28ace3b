--! use dispatch/reserve, yield
-- One fair-yield tick of a worker on a tenant-sharded queue (every few
-- hundred ms, see worker/fair_yield.rs). In one step:
-- 1. This worker's running yieldable jobs of the queue are recorded in `runs`
--    (seen now); its records of jobs it no longer runs (or runs again, a
--    new run) are removed (one that had been asked counts as honoured for
--    its tenant), and other workers'
--    records not seen for `stale` seconds (a dead worker) are dropped. A
--    job one of whose runs was asked within the cool-down keeps a record
--    (worker '') with that time until the cool-down passes, and its next run
--    carries it: no job is asked twice within the cool-down, across runs.
-- 2. It returns the jids of this worker's jobs that were asked to yield (the
--    delivery channel: each worker reads its own jobs' requests here at its
--    tick), counting once per ask a request still unhonoured after the
--    cool-down as ignored.
-- 3. The worker that takes the queue's decision lock (SET NX PX, so one
--    decides per tick) also gets a snapshot for the decision (the pure
--    `policy::share::decide`): the tenants running and the first `topk` of the
--    dispatch order with their settings, running and pending jobs and how
--    long they have been waiting (`waits`, kept here: a tenant enters when it
--    is seen in the order, leaves when it is not or when it is dispatched),
--    every recorded run, the queue's fair-yield settings, and the slot waits
--    the dispatches recorded since (drained). It also puts back in
--    the order a running tenant that left it at its cap while others waited
--    and may burst again now.
-- Cost: the jobs in flight on the queue plus `topk` tenants.
--
-- KEYS[1..13] = the shard state, KEYS[14] = wake, KEYS[15] = runs,
--   KEYS[16] = waits, KEYS[17] = yield stats, KEYS[18] = decision lock,
--   KEYS[19] = slot waits.
-- ARGV[1] = shard prefix, ARGV[2] = this worker (encoded), ARGV[3] = lock ms,
--   ARGV[4] = topk, ARGV[5] = stale seconds, then (jid, encoded tenant,
--   run start epoch seconds) per running iterable job of this worker.
-- Returns { asked jids, ignored now (count), decider (0|1), settings
--   {grace ms, min run ms, cool-down ms, off}, tenants (flat: tenant, running,
--   pending, weight, floor, cap, burst, waited, share hold, its seconds left),
--   runs (flat: jid, tenant, ran,
--   asked ago, started, reason, any run of the job asked ago), slot waits
--   (seconds) }; numbers as strings, ''
--   for none.

local sk = shard_keys(1, ARGV[1])
-- Settings read whole when small (the only write, an expired hold's HDEL,
-- comes after its tenant's settings were read).
shard_memo.policy_whole = true
local after = 1 + SHARD_NKEYS
local runs, waits, ystats = KEYS[after + 1], KEYS[after + 2], KEYS[after + 3]
local ylock, slotwaits = KEYS[after + 4], KEYS[after + 5]
local me, lock_ms, topk, stale = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = redis_now()
local conf = redis.call('HMGET', sk.policy, 'y:grace', 'y:minrun', 'y:cooldown', 'y:off')
local cooldown = (tonumber(conf[3] or '') or 10000) / 1000

local mine = {}
for i = 6, #ARGV - 2, 3 do
  mine[ARGV[i]] = { t = ARGV[i + 1], started = tonumber(ARGV[i + 2]) or now }
end
local entries, gone = {}, {}
-- When any run of `e`'s job was last asked (epoch seconds; 0: never).
local function last_ask(e) return math.max(e.asked, e.last) end
-- A run left its slot: its record is dropped, or, when one of the job's runs
-- was asked within the cool-down, kept as the job's (worker '') until the
-- cool-down passes, so that its next run is not asked again within it.
local function leave(jid, e)
  local last = last_ask(e)
  if last > 0 and now - last < cooldown then
    gone[jid] = { t = e.t, w = '', started = 0, asked = 0, ignored = false, seen = now,
      reason = '', last = last }
    redis.call('HSET', runs, jid, yield_format(gone[jid]))
  else
    redis.call('HDEL', runs, jid)
  end
end
local all = redis.call('HGETALL', runs)
for i = 1, #all, 2 do
  local jid, e = all[i], yield_parse(all[i + 1])
  if e == nil then
    redis.call('HDEL', runs, jid)
  elseif e.w == '' then
    if now - last_ask(e) >= cooldown then redis.call('HDEL', runs, jid) else gone[jid] = e end
  elseif e.w == me and not mine[jid] then
    if e.asked > 0 then redis.call('HINCRBY', ystats, 'h:' .. e.t, 1) end
    leave(jid, e)
  elseif e.w ~= me and now - e.seen > stale then
    leave(jid, e)
  else
    entries[jid] = e
  end
end
local asked, ignored = {}, 0
for jid, m in pairs(mine) do
  local e = entries[jid]
  local last = gone[jid] and last_ask(gone[jid]) or 0
  if e ~= nil and (e.w ~= me or math.abs(e.started - m.started) > 0.001) then
    -- A new run of the job here (after a yield, here or on another worker):
    -- the one asked before left its slot.
    if e.asked > 0 then redis.call('HINCRBY', ystats, 'h:' .. e.t, 1) end
    last = math.max(last, last_ask(e))
    e = nil
  end
  if e == nil then
    e = { t = m.t, w = me, started = m.started, asked = 0, ignored = false, reason = '',
      last = last }
    entries[jid] = e
  end
  e.seen = now
  if e.asked > 0 then
    asked[#asked + 1] = jid
    if not e.ignored and now - e.asked >= cooldown then
      e.ignored = true
      ignored = ignored + 1
      redis.call('HINCRBY', ystats, 'i:' .. e.t, 1)
    end
  end
  redis.call('HSET', runs, jid, yield_format(e))
end
if next(mine) ~= nil then redis.call('EXPIRE', runs, 3600) end

if not redis.call('SET', ylock, me, 'NX', 'PX', lock_ms) then
  return { asked, ignored, 0, {}, {}, {}, {} }
end

local order, listed = {}, {}
local function add(t)
  if not listed[t] then
    listed[t] = true
    order[#order + 1] = t
  end
end
local running_all = redis.call('HGETALL', sk.running)
for i = 1, #running_all, 2 do
  if running_all[i] ~= SHARD_RUNNING_MARK then
    add(running_all[i])
    -- Known now: no HGET per tenant below (nothing here changes a count).
    shard_memo.counts[running_all[i]] = tonumber(running_all[i + 1]) or 0
  end
end
local in_ready = {}
for _, m in ipairs(redis.call('ZRANGE', sk.floorq, 0, topk - 1)) do
  local t = string.sub(m, 16)
  in_ready[t] = true
  add(t)
end
for _, m in ipairs(redis.call('ZRANGE', sk.ready, 0, topk - 1)) do
  if m ~= SHARD_READY_MARK then
    local t = string.sub(m, 16)
    in_ready[t] = true
    add(t)
  end
end

-- Waiting since (a dispatch of the tenant takes its entry, see
-- shard_fetch.lua, and records how long it waited in `slotwaits`).
local waited = {}
local w_all = redis.call('HGETALL', waits)
for i = 1, #w_all, 2 do
  local t, since = w_all[i], tonumber(w_all[i + 1])
  if since == nil or not in_ready[t] then
    redis.call('HDEL', waits, t)
  else
    waited[t] = now - since
  end
end
for t in pairs(in_ready) do
  if waited[t] == nil then
    redis.call('HSET', waits, t, fj_num(now))
    waited[t] = 0
  end
end
local slot_waits = redis.call('LRANGE', slotwaits, 0, -1)
redis.call('DEL', slotwaits)
redis.call('EXPIRE', waits, 3600)

local rows = {}
local woke = false
for _, t in ipairs(order) do
  local p = shard_policy_of(sk, t)
  if shard_memo.counts[t] == nil then shard_memo.counts[t] = 0 end
  local pending = redis.call('LLEN', sk.prefix .. t)
  -- Only a tenant with a cap, a share hold or a rate can be out of the order
  -- with pending jobs (see shard_release).
  if pending > 0 and not in_ready[t] and (p.cap ~= nil or p.hold_raw or p.rate ~= nil)
      and redis.call('HEXISTS', sk.rmember, t) == 0 then
    -- Left the order at its cap while others waited: back in if it may burst
    -- now (one waiting for its rate stays out until its time).
    if shard_consider(sk, t) then woke = true end
  end
  rows[#rows + 1] = t
  rows[#rows + 1] = tostring(shard_running(sk, t))
  rows[#rows + 1] = tostring(pending)
  rows[#rows + 1] = fj_num(p.weight)
  rows[#rows + 1] = tostring(p.floor)
  rows[#rows + 1] = p.cap and tostring(p.cap) or ''
  rows[#rows + 1] = p.burst and tostring(p.burst) or ''
  rows[#rows + 1] = waited[t] and fj_num(waited[t]) or ''
  -- Its share hold in force: the limit and the seconds left.
  local hold_left = ''
  if p.hold then
    local _, hu = string.match(p.hold_raw, '^(%d+)|(%d+)$')
    hold_left = fj_num((tonumber(hu) - fj_now_us()) / 1000000)
  elseif p.hold_raw then
    -- An expired hold is dropped.
    redis.call('HDEL', sk.policy, 'h:' .. t)
  end
  rows[#rows + 1] = p.hold and tostring(p.hold) or ''
  rows[#rows + 1] = hold_left
end
if woke then fj_wake(KEYS[after]) end
local jobs = {}
for jid, e in pairs(entries) do
  jobs[#jobs + 1] = jid
  jobs[#jobs + 1] = e.t
  jobs[#jobs + 1] = fj_num(now - e.started)
  jobs[#jobs + 1] = e.asked > 0 and fj_num(now - e.asked) or ''
  jobs[#jobs + 1] = fj_num(e.started)
  jobs[#jobs + 1] = e.reason or ''
  jobs[#jobs + 1] = last_ask(e) > 0 and fj_num(now - last_ask(e)) or ''
end
local settings = { conf[1] or '', conf[2] or '', conf[3] or '', conf[4] or '' }
return { asked, ignored, 1, settings, rows, jobs, slot_waits }
