--! use clock, reroute
-- Redis Cluster mode's first step of a rerouted push: register jobs in one
-- reroute window and choose each one's queue (lib/reroute.lua); the caller
-- then pushes each to the queue chosen, in that queue's slot. A crash between
-- the two steps leaves the window counting a job that was not pushed (the
-- push fails and is retried by the caller): a reroute a little early, never a
-- lost job.
-- KEYS[1] = the window. ARGV[1] = clock offset, ARGV[2] = max window seconds;
--   then per job: member ('jid:<jid>'), rule count, per rule: threshold, per seconds.
-- Returns, per job, the 1-based chosen candidate.
local now = math.floor(redis_now(ARGV[1]))
local maxw = tonumber(ARGV[2])
local out = {}
local ai = 3
local seen = {}
while ai <= #ARGV do
  local member, nrules = ARGV[ai], tonumber(ARGV[ai + 1])
  ai = ai + 2
  local rules = {}
  for r = 1, nrules do
    rules[r] = { tonumber(ARGV[ai]), tonumber(ARGV[ai + 1]) }
    ai = ai + 2
  end
  out[#out + 1] = window_choose(KEYS[1], now, member, maxw, rules, seen)
end
return out
