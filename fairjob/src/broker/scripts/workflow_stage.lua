--! use batch
-- Stages the steps of a workflow being built (`Workflow::commit`, in
-- chunks), as batch_stage.lua stages a batch's members: each step is a
-- member, its facts go to the workflow's hash (see lib/batch.lua), a step
-- without dependencies waits in the staged set to be pushed at the flip, a
-- step with some is held (its payload split at its enqueued_at value).
-- Nothing is runnable before batch_commit.lua flips the batch open; until
-- then every key expires after ARGV[2] seconds. For the views, each step
-- also gets its place in name order (the list `:steps`) and its declared
-- dependencies (`d:<e>`, `dn:<e>`); a held step is counted in the batch's
-- `held` and indexed by jid for explain (see lib/batch.lua `fj_wf_hold`).
-- KEYS[1] = the batch's hash.
-- ARGV[1] = now (seconds), ARGV[2] = staging ttl seconds, ARGV[3] =
-- description, ARGV[4] = tenant, ARGV[5] = the batch's id, ARGV[6] = the
-- prefix of the held steps' index keys (built by broker/keys.rs), then per
-- step:
-- jid, encoded name, name, payload, held ('1'/'0'), policy, queue list,
-- wake list, queue name, the number of dependencies then each (encoded), the
-- number of per-edge policies then each (encoded dependency, policy). Steps
-- come in name order, so each step's list of dependents (`an:`, `a:<e>:<i>`,
-- appended as its dependents are staged) is sorted by name. A step staged
-- already (a commit repeated after a crash, with the same bid) is skipped, so
-- its dependents are listed once.
-- Returns 1, or 0 when the batch is no longer staging.
local p = KEYS[1]
local now = tonumber(ARGV[1])
local state = redis.call('HGET', p, 'state')
if state and state ~= 'staging' then return 0 end
if not state then
  redis.call('HSET', p, 'state', 'staging', 'created_at', ARGV[1], 'total', 0,
    'desc', ARGV[3], 'tenant', ARGV[4], 'wf', '1', 'ix', ARGV[6])
end
local w = p .. ':wf'
local roots, root_payloads, held_jids, held_payloads, order = {}, {}, {}, {}, {}
local i = 7
while i <= #ARGV do
  local jid, e, name, payload, held = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local fresh = redis.call('HSETNX', w, 'jid:' .. e, jid) == 1
  if fresh then
    order[#order + 1] = e
    redis.call('HSET', w, 'n:' .. e, name, 'name:' .. jid, e,
      's:' .. e, held == '1' and 'held' or 'queued', 'p:' .. e, ARGV[i + 5],
      'q:' .. e, ARGV[i + 6], 'w:' .. e, ARGV[i + 7], 'qn:' .. e, ARGV[i + 8])
  end
  i = i + 9
  local nd = tonumber(ARGV[i]); i = i + 1
  local kept = {}
  for _ = 1, nd do
    local d = ARGV[i]; i = i + 1
    if fresh then
      if #kept < FJ_WF_DEPS_KEPT then kept[#kept + 1] = d end
      redis.call('HSET', w, 'we:' .. e .. ':' .. d, '1')
      local at = redis.call('HINCRBY', w, 'an:' .. d, 1)
      redis.call('HSET', w, 'a:' .. d .. ':' .. at, e)
    end
  end
  if fresh and nd > 0 then
    redis.call('HSET', w, 'wn:' .. e, nd, 'd:' .. e, table.concat(kept, ','))
  elseif fresh then
    redis.call('HSET', w, 'wn:' .. e, 0)
  end
  if fresh and nd > #kept then redis.call('HSET', w, 'dn:' .. e, nd) end
  local ne = tonumber(ARGV[i]); i = i + 1
  for _ = 1, ne do
    if fresh then redis.call('HSET', w, 'pe:' .. e .. ':' .. ARGV[i], ARGV[i + 1]) end
    i = i + 2
  end
  if fresh and held == '1' then
    held_jids[#held_jids + 1] = jid
    held_payloads[#held_payloads + 1] = payload
  elseif fresh then
    roots[#roots + 1] = jid
    root_payloads[#root_payloads + 1] = payload
  end
end
-- The steps in name order, for pages of them (after those staged before).
for n = 1, #order, 1000 do
  redis.call('RPUSH', p .. ':steps', unpack(order, n, math.min(#order, n + 999)))
end
fj_batch_join(p, held_jids, held_payloads)
fj_wf_hold(p, ARGV[5], held_jids, tonumber(ARGV[2]))
fj_batch_add_many(p, roots, root_payloads, now)
fj_batch_expire(p, tonumber(ARGV[2]))
return 1
