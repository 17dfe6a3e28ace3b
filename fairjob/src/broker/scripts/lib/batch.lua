--! use common
-- Batches' membership (the twin of fairjob::policy::batch): a batch `p` (its
-- hash's key; its other keys are `p` and a suffix, in the same cluster slot)
-- keeps two sets of member jids: `:pending`, the members that have not run
-- once, and `:jids`, those that have not succeeded. A member's end takes it
-- out of them in the same script as the end itself (the worker's one exit),
-- and an event fires only when its set is empty: `complete` when no member is
-- pending, `success` after `complete` when none is unsucceeded, `death` at
-- the first member that dies. Each fires once (`HSETNX <event>_at`): a
-- duplicate end, a member run twice or a replay changes no set and fires
-- nothing. A fired event enqueues its callback job (stored at commit, split
-- around its `enqueued_at` value) on its queue and wakes a worker.
--
-- The hash: `state` ('staging' until the commit flips it 'open'), `total`,
-- `created_at`, `complete_at` / `success_at` / `death_at`, per event `cb:`
-- (the callback's payload, split at its enqueued_at value by a newline), `cbq:`
-- (its queue's list), `cbw:` (its wake list), `cbn:` (its queue's name), `qs`
-- (the `queues` set), `keep` (seconds the data stays after `success`) and,
-- on a Redis Cluster, `split` (a fired callback waits in `:due` for the
-- caller to push it);
-- for a child batch, `parent` (the parent's hash) and `kid` (its member id
-- in the parent, `b:<bid>`).
--
-- A child batch is a member of its parent: the parent's `complete` waits for
-- the child to have run (its `complete` callback ran once, or it fired
-- `complete` without one) and its `success` for the child's success (its
-- `success` callback succeeded, or it fired `success` without one), so the
-- parent's callbacks come after the children's, at any depth. The callback
-- job's end reports it (outcomes 'kid_ran' / 'kid_ok' on the parent).

-- How long an open batch's data lives, and one with a dead member (as the
-- dead set keeps its jobs, so a dead member retried by hand still resolves).
local FJ_BATCH_KEEP_OPEN = 30 * 86400
local FJ_BATCH_KEEP_DEAD = 180 * 86400

local function fj_batch_keys(p)
  return { p, p .. ':pending', p .. ':jids', p .. ':failed', p .. ':staged', p .. ':payloads',
    p .. ':wf', p .. ':results', p .. ':due', p .. ':wq', p .. ':steps' }
end

local function fj_batch_expire(p, secs)
  for _, k in ipairs(fj_batch_keys(p)) do redis.call('EXPIRE', k, secs) end
end

local fj_batch_settle

-- A child `kid` of batch `p` has run ('kid_ran') or succeeded ('kid_ok').
local function fj_batch_kid(p, kid, outcome, now)
  if redis.call('EXISTS', p) == 0 then return {} end
  redis.call('SREM', p .. ':pending', kid)
  if outcome == 'kid_ok' then redis.call('SREM', p .. ':jids', kid) end
  return fj_batch_settle(p, now)
end

-- Pushes a stored payload `v` (split at its enqueued_at value by a
-- newline, the time spliced in now) to queue `name` (its list `list`, wake
-- list `wake`) and registers the queue in `qs`.
local function fj_batch_push(v, now, list, wake, name, qs)
  local cut = string.find(v, '\n', 1, true)
  if cut then v = string.sub(v, 1, cut - 1) .. string.format('%.6f', now) .. string.sub(v, cut + 1) end
  redis.call('LPUSH', list, v)
  if qs then redis.call('SADD', qs, name) end
  fj_wake(wake)
end

-- Fires `event` once (true the first time): its time, and its callback
-- pushed to its queue; a child without a callback for `complete` or
-- `success` reports to its parent at once.
local function fj_batch_fire(p, event, now)
  if redis.call('HSETNX', p, event .. '_at', string.format('%.6f', now)) == 0 then return false end
  local cb = redis.call('HMGET', p, 'cb:' .. event, 'cbq:' .. event, 'cbw:' .. event,
    'cbn:' .. event, 'qs')
  if cb[1] and redis.call('HEXISTS', p, 'split') == 1 then
    -- A Redis Cluster: its queue is in another slot; the caller pushes it
    -- from here (`:due`, a claim that push.lua's two steps drop once).
    redis.call('ZADD', p .. ':due', now, event)
  elseif cb[1] then
    fj_batch_push(cb[1], now, cb[2], cb[3], cb[4], cb[5])
  elseif event ~= 'death' then
    local up = redis.call('HMGET', p, 'parent', 'kid')
    if up[1] then
      fj_batch_kid(up[1], up[2], event == 'success' and 'kid_ok' or 'kid_ran', now)
    end
  end
  return true
end

-- Fires what the sets now allow (an open batch only); returns the events
-- fired, in order. After `success` the data stays `keep` seconds.
fj_batch_settle = function(p, now)
  local fired = {}
  if redis.call('HGET', p, 'state') ~= 'open' then return fired end
  if redis.call('SCARD', p .. ':pending') == 0 and fj_batch_fire(p, 'complete', now) then
    fired[#fired + 1] = 'complete'
  end
  if redis.call('HEXISTS', p, 'complete_at') == 1 and redis.call('SCARD', p .. ':jids') == 0
      and fj_batch_fire(p, 'success', now) then
    fired[#fired + 1] = 'success'
    fj_batch_expire(p, tonumber(redis.call('HGET', p, 'keep') or '86400'))
  end
  return fired
end

-- Workflows (the twin of fairjob::policy::workflow): a workflow is a batch
-- (hash field `wf`) whose members are named steps. Everything of its steps
-- is in one hash, `p .. ':wf'`, by step (`<e>`: the name encoded with
-- fj_encode): `jid:<e>`, `n:<e>` (the name), `name:<jid>` (the encoded
-- name), `s:<e>` its state (held|queued|retrying|done|failed|cancelled),
-- `p:<e>` its policy for a failed dependency (cancel|continue|ignore) and
-- `pe:<e>:<dep e>` per-edge overrides, `q:<e>` / `w:<e>` / `qn:<e>` its
-- queue's list, wake list and name, `an:<e>` and `a:<e>:<i>` the steps that
-- depend on it (encoded, sorted by name), `wn:<e>` how many
-- dependencies it still waits for and `we:<e>:<dep e>` each of them, `fd:<e>`
-- the failed dependencies it continued past (encoded, comma-separated). A
-- held step's payload waits in `:payloads`, split at its enqueued_at value
-- by a newline: it holds no queue position and no worker.
--
-- For the views only (no rule reads them): the list `p .. ':steps'` (the
-- steps' encoded names in name order: a page of steps is an LRANGE, not a
-- scan), `d:<e>` (its first FJ_WF_DEPS_KEPT dependencies as declared,
-- encoded, comma-separated) and `dn:<e>` (how many it has, when more than
-- those), the batch's `held` (steps
-- held now: the metrics sampler sums it over the newest batches) and, per
-- held step, an index key `<ix><encoded jid>` holding the bid (`ix`, the
-- prefix broker/keys.rs built, stored in the batch's hash), so explain finds
-- a step that is in no queue. The count and the index change only on a
-- step's way into and out of `held` (staging; release or cancel), in the
-- same script, a few commands per call (fj_wf_hold, fj_wf_unheld_flush).

-- Dependents processed per script call at most: a step with 10,000
-- dependents is released in calls of this many (`:wq`, below), so no call
-- runs long.
local FJ_WF_BUDGET = 25

-- A step's dependencies kept for the views (`d:<e>`), at most: a page or
-- explain names those it still waits for among them.
local FJ_WF_DEPS_KEPT = 100

-- Held steps `jids` of workflow `bid` (hash `p`), just staged: counted,
-- and indexed by jid for explain. An index key lives as long as the batch
-- can (staging, then a dead member's 180 days) and goes when its step
-- leaves `held` (fj_wf_unhold); one whose batch expired still holding the
-- step is ignored (and deleted) by explain.
local function fj_wf_hold(p, bid, jids, staging_ttl)
  if #jids == 0 then return end
  redis.call('HINCRBY', p, 'held', #jids)
  local ix = redis.call('HGET', p, 'ix')
  if not ix then return end
  for _, jid in ipairs(jids) do
    redis.call('SET', ix .. fj_encode(jid), bid, 'EX', staging_ttl + FJ_BATCH_KEEP_DEAD)
  end
end

-- Held steps that left `held` (released or cancelled) in this call:
-- fj_wf_work, through which every release and cancel goes, writes them
-- once at its end (fj_wf_unheld_flush): one HINCRBY, one HGET and one DEL
-- per call, not per step.
local fj_wf_unheld = {}

local function fj_wf_unhold(jid)
  fj_wf_unheld[#fj_wf_unheld + 1] = jid
end

local function fj_wf_unheld_flush(p)
  local jids = fj_wf_unheld
  fj_wf_unheld = {}
  if #jids == 0 then return end
  redis.call('HINCRBY', p, 'held', -#jids)
  local ix = redis.call('HGET', p, 'ix')
  if not ix then return end
  local keys = {}
  for n, jid in ipairs(jids) do keys[n] = ix .. fj_encode(jid) end
  for n = 1, #keys, 1000 do redis.call('DEL', unpack(keys, n, math.min(#keys, n + 999))) end
end

-- Releases held step `e` into its queue and wakes a worker.
local function fj_wf_release(p, e, now)
  local w = p .. ':wf'
  local f = redis.call('HMGET', w, 'jid:' .. e, 'q:' .. e, 'w:' .. e, 'qn:' .. e)
  redis.call('HSET', w, 's:' .. e, 'queued')
  fj_wf_unhold(f[1])
  local v = redis.call('HGET', p .. ':payloads', f[1])
  if not v then return end
  fj_batch_push(v, now, f[2], f[3], f[4], redis.call('HGET', p, 'qs'))
  redis.call('HDEL', p .. ':payloads', f[1])
end

-- Dependency `dep` of step `e` is met (or dropped): released when none is
-- left (a step that is no longer held, or a dependency already met,
-- changes nothing).
local function fj_wf_met(p, e, dep, now)
  local w = p .. ':wf'
  if redis.call('HGET', w, 's:' .. e) ~= 'held' then return end
  if redis.call('HDEL', w, 'we:' .. e .. ':' .. dep) == 0 then return end
  if redis.call('HINCRBY', w, 'wn:' .. e, -1) <= 0 then fj_wf_release(p, e, now) end
end

-- Held step `d` sees its dependency `f` failed for good: its edge's policy.
local function fj_wf_dep_failed(p, d, f, now)
  local w = p .. ':wf'
  if redis.call('HGET', w, 's:' .. d) ~= 'held' then return end
  local pol = redis.call('HGET', w, 'pe:' .. d .. ':' .. f) or redis.call('HGET', w, 'p:' .. d) or 'cancel'
  if pol == 'continue' or pol == 'ignore' then
    if pol == 'continue' then
      -- Listed once (a dependency retried by hand may die again).
      local had = redis.call('HGET', w, 'fd:' .. d)
      local listed = false
      for x in string.gmatch(had or '', '[^,]+') do
        if x == f then listed = true end
      end
      if not listed then redis.call('HSET', w, 'fd:' .. d, (had and had .. ',' or '') .. f) end
    end
    fj_wf_met(p, d, f, now)
  else
    redis.call('HSET', w, 's:' .. d, 'cancelled')
    local jid = redis.call('HGET', w, 'jid:' .. d)
    fj_wf_unhold(jid)
    redis.call('SREM', p .. ':pending', jid)
    redis.call('HSET', p .. ':failed', jid, 'cancelled: dependency `' .. redis.call('HGET', w, 'n:' .. f) .. '` failed')
    redis.call('HDEL', p .. ':payloads', jid)
    -- Its own dependents see a failed dependency in turn.
    redis.call('RPUSH', p .. ':wq', 'fail:' .. d)
  end
end

-- Works through `:wq`, the steps whose dependents are still to be told
-- (`ok:<e>`: it succeeded; `fail:<e>`: it failed for good), in order, at
-- most FJ_WF_BUDGET dependents per call; `ai:<e>` is how far a step's list
-- (`an:<e>` entries `a:<e>:<i>`, sorted by name) was told. Returns the
-- items left.
local function fj_wf_work(p, now)
  local w = p .. ':wf'
  local budget = FJ_WF_BUDGET
  fj_wf_unheld = {}
  while budget > 0 do
    local item = redis.call('LINDEX', p .. ':wq', 0)
    if not item then break end
    local kind, e = string.match(item, '^(%a+):(.*)$')
    local n = tonumber(redis.call('HGET', w, 'an:' .. e) or '0')
    local i = tonumber(redis.call('HGET', w, 'ai:' .. e) or '0')
    local last = math.min(n, i + budget)
    if last > i then
      local fields = {}
      for k = i + 1, last do fields[#fields + 1] = 'a:' .. e .. ':' .. k end
      local deps = redis.call('HMGET', w, unpack(fields))
      for _, d in ipairs(deps) do
        if d then
          if kind == 'ok' then fj_wf_met(p, d, e, now) else fj_wf_dep_failed(p, d, e, now) end
        end
      end
      budget = budget - (last - i)
    end
    if last >= n then
      redis.call('LPOP', p .. ':wq')
      redis.call('HDEL', w, 'ai:' .. e)
    else
      redis.call('HSET', w, 'ai:' .. e, last)
    end
  end
  fj_wf_unheld_flush(p)
  return redis.call('LLEN', p .. ':wq')
end

-- Step `jid`'s end (a workflow's member): its state, and its dependents to
-- tell (now, within the budget; the rest by later calls, see fj_wf_work).
local function fj_wf_end(p, jid, outcome, now)
  local w = p .. ':wf'
  local e = redis.call('HGET', w, 'name:' .. jid)
  if not e then return end
  if outcome == 'ok' then
    if redis.call('HGET', w, 's:' .. e) == 'done' then return end
    redis.call('HSET', w, 's:' .. e, 'done')
    redis.call('RPUSH', p .. ':wq', 'ok:' .. e)
  elseif outcome == 'dead' or outcome == 'discarded' then
    if redis.call('HGET', w, 's:' .. e) == 'failed' then return end
    redis.call('HSET', w, 's:' .. e, 'failed')
    redis.call('RPUSH', p .. ':wq', 'fail:' .. e)
  elseif outcome == 'retry' then
    redis.call('HSET', w, 's:' .. e, 'retrying')
    return
  else
    return
  end
  fj_wf_work(p, now)
end

-- A member's end: outcome 'ok' (succeeded), 'retry' (failed, waits in
-- retry), 'dead' (buried) or 'discarded' (failed, kept nowhere); or a child
-- batch's callback's end ('kid_ran', 'kid_ok', `jid` the child's member id). `err` is
-- the failure ('' for none), kept for the batch's status until the member
-- succeeds. A jid that is not a member (or a batch that is gone) changes
-- nothing. Returns the events fired.
local function fj_batch_end(p, jid, outcome, now, err)
  if outcome == 'kid_ran' or outcome == 'kid_ok' then return fj_batch_kid(p, jid, outcome, now) end
  if redis.call('EXISTS', p) == 0 then return {} end
  redis.call('SREM', p .. ':pending', jid)
  local member = redis.call('SISMEMBER', p .. ':jids', jid) == 1
  local fired = {}
  if outcome == 'ok' then
    if member then
      redis.call('SREM', p .. ':jids', jid)
      redis.call('HDEL', p .. ':failed', jid)
    end
  elseif member then
    if err ~= '' then redis.call('HSET', p .. ':failed', jid, err) end
    if outcome == 'dead' then
      if fj_batch_fire(p, 'death', now) then fired[#fired + 1] = 'death' end
      if redis.call('HEXISTS', p, 'success_at') == 0 then fj_batch_expire(p, FJ_BATCH_KEEP_DEAD) end
    end
  end
  if redis.call('HEXISTS', p, 'wf') == 1 then fj_wf_end(p, jid, outcome, now) end
  for _, e in ipairs(fj_batch_settle(p, now)) do fired[#fired + 1] = e end
  return fired
end

-- Registers a new member `jid` (staged with `payload` until it is pushed).
-- 'gone' when the batch is unknown or expired, 'finished' when it has fired
-- `complete` (a reopened batch cannot take more), else 'ok'.
local fj_batch_add_many

local function fj_batch_add(p, jid, payload, now)
  local state = redis.call('HGET', p, 'state')
  if not state then return 'gone' end
  if redis.call('HEXISTS', p, 'complete_at') == 1 then return 'finished' end
  fj_batch_add_many(p, { jid }, { payload }, now)
  return 'ok'
end

-- Registers child batch `kid` (member id `b:<bid>`, hash `c`) in parent `p`
-- before the child opens: 'gone' when the parent is unknown or expired,
-- 'finished' when it fired `complete`, else 'ok'.
local function fj_batch_adopt(p, c, kid)
  if not redis.call('HGET', p, 'state') then return 'gone' end
  if redis.call('HEXISTS', p, 'complete_at') == 1 then return 'finished' end
  redis.call('SADD', p .. ':pending', kid)
  redis.call('SADD', p .. ':jids', kid)
  redis.call('HINCRBY', p, 'kids', 1)
  redis.call('HSET', c, 'parent', p, 'kid', kid)
  return 'ok'
end

-- Makes `jids` members (pending, unsucceeded, counted in `total` once) and
-- keeps their `payloads` (stored as given). A few commands per call, not
-- per member.
local function fj_batch_join(p, jids, payloads)
  local added = 0
  local pairs_flat = {}
  for i, jid in ipairs(jids) do
    pairs_flat[#pairs_flat + 1] = jid
    pairs_flat[#pairs_flat + 1] = payloads[i]
  end
  for i = 1, #jids, 1000 do
    local j = math.min(#jids, i + 999)
    added = added + redis.call('SADD', p .. ':pending', unpack(jids, i, j))
    redis.call('SADD', p .. ':jids', unpack(jids, i, j))
  end
  fj_hset(p .. ':payloads', pairs_flat)
  if added > 0 then redis.call('HINCRBY', p, 'total', added) end
end

-- Registers many new members at once (a staging chunk, or one added by a
-- member), each staged at `now` to be pushed; the caller checked the
-- batch's state.
fj_batch_add_many = function(p, jids, payloads, now)
  fj_batch_join(p, jids, payloads)
  local scored = {}
  for _, jid in ipairs(jids) do
    scored[#scored + 1] = now
    scored[#scored + 1] = jid
  end
  for i = 1, #scored, 1000 do
    redis.call('ZADD', p .. ':staged', unpack(scored, i, math.min(#scored, i + 999)))
  end
end

-- Whether a workflow's dependents are left to tell after a call's budget
-- (the caller then calls workflow_work.lua until none is).
local function fj_batch_more(p)
  return redis.call('LLEN', p .. ':wq') > 0
end
