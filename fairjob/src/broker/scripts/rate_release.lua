-- Release a rate limiter's waiters that the rule allows now, one emission
-- interval apart (plus the burst), to the front of their queues, and schedule
-- its next release. Several workers may call it for one key at once: the rule
-- decides, so no more are released than the rate allows.
-- KEYS[1..4] = tat, conf, waiters, reserved; KEYS[5] = release schedule.
-- ARGV[1] = the key's member in the schedule, ARGV[2] = reservation ttl µs,
-- ARGV[3] = most to release in one call, ARGV[4], ARGV[5] = queue and wake
-- key prefixes.
-- Returns {released, next release µs or -1, now µs}.
local rk = rate_keys(1, 5)
local now = rate_now_us()
local n, nxt = rate_release_waiters(rk, ARGV[1], now, tonumber(ARGV[2]),
  tonumber(ARGV[3]), { prefix = ARGV[4] }, { prefix = ARGV[5] })
return { n, nxt, now }
