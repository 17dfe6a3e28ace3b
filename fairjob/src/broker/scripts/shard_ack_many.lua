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
local fenced, wake = shard_ack_list(sk, KEYS[1], ARGV, 2, KEYS[16], KEYS[17])
shard_flush(sk)
if wake then
  fj_wake(KEYS[2 + SHARD_NKEYS])
end
return fenced
