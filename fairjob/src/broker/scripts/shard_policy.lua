--! use dispatch/reserve
-- Set (or clear) a sharded queue's fair-share settings for one tenant, or the
-- defaults (tenant '*'): weight (share under contention, default 1), floor
-- (jobs guaranteed running; under it a tenant is served before share order),
-- cap (the running limit; 0 pauses), rate (`<limit>/<period µs>`, starts
-- per period; a tenant whose rate is spent waits out of the order, its pass
-- kept) and burst. Then bring the listed tenants' place
-- in the dispatch order up to date, so a change applies to the very next
-- dispatch (the caller lists tenants in bounded batches: no call walks them
-- all), and move a bounded number of tenants from a 0.1 round-robin ring.
--
-- KEYS[1..13] = the shard state, KEYS[14] = wake.
-- ARGV[1] = shard prefix, ARGV[2] = encoded tenant or '*',
--   ARGV[3], ARGV[4], ARGV[5], ARGV[6] = weight, floor, cap, rate: a value,
--   '' to clear, or '-' to leave as is; ARGV[7] = burst, the same way (the
--   running limit while no other tenant is in the order, when above the
--   cap); ARGV[8] = entries of a 0.1 ring to migrate at most (a 0.1 `limits`
--   hash is copied into `policy` whenever it is found); ARGV[9..] = encoded
--   tenants to re-check.
-- Returns how many tenants entered the order (and wakes a worker if any did).

local sk = shard_keys(1, ARGV[1])
local function set_setting(field, value)
  if value == '' then
    redis.call('HDEL', sk.policy, field)
  elseif value ~= '-' then
    redis.call('HSET', sk.policy, field, value)
  end
end
set_setting('w:' .. ARGV[2], ARGV[3])
set_setting('f:' .. ARGV[2], ARGV[4])
set_setting('c:' .. ARGV[2], ARGV[5])
set_setting('r:' .. ARGV[2], ARGV[6])
set_setting('b:' .. ARGV[2], ARGV[7])
local entered = 0
local before = redis.call('ZCOUNT', sk.ready, '-inf', '(+inf')
shard_migrate(sk, tonumber(ARGV[8]))
for i = 9, #ARGV do
  if shard_consider(sk, ARGV[i]) then entered = entered + 1 end
end
entered = math.max(entered, redis.call('ZCOUNT', sk.ready, '-inf', '(+inf') - before)
if entered > 0 then
  fj_wake(KEYS[1 + SHARD_NKEYS])
end
return entered
