--! use batch, clock
-- Tells a workflow's steps about their dependencies' ends that a member's
-- exit left for later (more dependents than one call's budget, see
-- lib/batch.lua `fj_wf_work`): another budget's worth, then fires what the
-- batch's sets allow.
-- KEYS[1] = the batch's hash. ARGV[1] = clock offset.
-- Returns {items left, events fired...}.
local now = redis_now(ARGV[1])
local left = fj_wf_work(KEYS[1], now)
local out = { left }
for _, e in ipairs(fj_batch_settle(KEYS[1], now)) do out[#out + 1] = e end
return out
