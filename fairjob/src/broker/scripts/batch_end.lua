--! use batch, clock
-- A batch member's end as a step of its own: on a Redis Cluster, where the
-- member's exit script runs in its queue's slot and cannot reach the batch's
-- keys (on one server the exit's own script does this, see lib/batch.lua).
-- Idempotent: a repeat after a lost reply changes nothing.
-- KEYS[1] = the batch's hash.
-- ARGV[1] = jid, ARGV[2] = outcome (ok|retry|dead|discarded), ARGV[3] = the
-- failure ('' for none), ARGV[4] = clock offset.
-- Returns the events fired.
return fj_batch_end(KEYS[1], ARGV[1], ARGV[2], redis_now(ARGV[4]), ARGV[3])
