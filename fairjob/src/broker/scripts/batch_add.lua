--! use batch
-- Adds a member to an open batch from one of its running members (the
-- member's own end comes later, so the batch cannot complete in between):
-- registered and staged in one step, then pushed like a committed member.
-- KEYS[1] = the batch's hash.
-- ARGV[1] = now (seconds), ARGV[2] = jid, ARGV[3] = payload.
-- Returns 'ok', 'gone' (no such batch) or 'finished' (it fired `complete`).
return fj_batch_add(KEYS[1], ARGV[2], ARGV[3], tonumber(ARGV[1]))
