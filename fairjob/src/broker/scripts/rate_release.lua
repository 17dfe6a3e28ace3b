--! use gcra, clock
-- Release a rate limiter's waiters that the rule allows now, one emission
-- interval apart (plus the burst), to the front of their queues, and schedule
-- its next release. Several workers may call it for one key at once: the rule
-- decides, so no more are released than the rate allows.
-- KEYS[1..4] = tat, conf, waiters, reserved; KEYS[5] = release schedule (in
--   Redis Cluster mode the limiter's own `next`); KEYS[6] = in cluster mode,
--   the releasing set.
-- ARGV[1] = the key's member in the schedule, ARGV[2] = reservation ttl µs,
-- ARGV[3] = most to release in one call, ARGV[4], ARGV[5] = queue and wake
-- key prefixes, ARGV[6] = 'c' in cluster mode (released waiters are staged in
-- the releasing set, leased ARGV[7] ms, and returned for the caller to deliver).
-- Returns {released, next release µs or -1, now µs, staged entries...}.
local rk = rate_keys(1, 5)
if ARGV[6] == 'c' then
  rk.releasing = KEYS[6]
  rk.lease_ms = tonumber(ARGV[7])
end
local now = fj_now_us()
local n, nxt = rate_release_waiters(rk, ARGV[1], now, tonumber(ARGV[2]),
  tonumber(ARGV[3]), { prefix = ARGV[4] }, { prefix = ARGV[5] })
local out = { n, nxt, now }
for _, e in ipairs(rk.staged) do out[#out + 1] = e end
return out
