--! use dispatch/reserve
-- Ack several jobs of one tenant-sharded queue held in one in-progress record,
-- in one step, each fenced by its own token (a batch of the worker's acks; see
-- worker/acks.rs): as shard_finish.lua's 'done' for each, releasing its
-- tenant's running count, and one wake-up if that made a tenant runnable.
--
-- KEYS[1] = in-progress hash, KEYS[2..14] = the shard state, KEYS[15] = wake.
-- ARGV[1] = shard prefix, then (token, encoded tenant, kept jid) triples: the
--   kept jid is '' except for a job a relay keeps (fairjob-postgres' "Postgres
--   stays the truth"), whose end is then recorded in the same step (`done
--   <jid>` pushed to the relay's completion list KEYS[16], the jid removed
--   from its live set KEYS[17]; passed only when the call holds such a job,
--   on one server: those keys are in another cluster slot).
-- Returns the 1-based positions of the triples whose token was gone (fenced:
-- the job had been recovered from this worker; its count was released then,
-- and its end is not recorded).

local sk = shard_keys(2, ARGV[1])
shard_memo.policy_whole = true
shard_memo.defer_counts = true
local tokens = {}
for i = 2, #ARGV - 2, 3 do tokens[#tokens + 1] = ARGV[i] end
if #tokens == 0 then return {} end
local held = fj_hmget(KEYS[1], tokens)
-- The records still held, and their tenants (ARGV[3k] for the k-th token).
local gone, ts = {}, {}
for k = 1, #tokens do
  if held[k] then
    gone[#gone + 1] = tokens[k]
    ts[#ts + 1] = ARGV[3 * k]
  end
end
if #gone > 0 then fj_hdel(KEYS[1], gone) end
shard_prefetch(sk, ts, true)
local fenced = {}
local wake = false
for k = 1, #tokens do
  if not held[k] then
    fenced[#fenced + 1] = k
  else
    local i = 2 + 3 * (k - 1)
    if shard_release(sk, ARGV[i + 1]) then
      wake = true
    end
    if ARGV[i + 2] ~= '' then
      redis.call('RPUSH', KEYS[16], 'done ' .. ARGV[i + 2])
      redis.call('SREM', KEYS[17], ARGV[i + 2])
    end
  end
end
shard_flush(sk)
if wake then
  fj_wake(KEYS[2 + SHARD_NKEYS])
end
return fenced
