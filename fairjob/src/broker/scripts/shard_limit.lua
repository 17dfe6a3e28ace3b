-- Set (or clear, with an empty value) a sharded queue's running limit for one
-- tenant, or its default (tenant '*'), and put tenants that became runnable back
-- in the ring at once, so a raised limit takes effect on the next fetch, and
-- take out those that no longer are (a lowered limit, 0 = paused).
-- KEYS[1..5] = ring, seq, running, limits, tenants.
-- ARGV[1] = shard prefix, ARGV[2] = encoded tenant or '*', ARGV[3] = limit, '' to
-- clear, or '-' to leave the limit alone (a later batch of a default change);
-- ARGV[4..] = tenants to re-check (the worker passes them in bounded batches, so
-- no call walks all tenants). Returns how many tenants entered the ring.
local sk = { ring = KEYS[1], seq = KEYS[2], running = KEYS[3], limits = KEYS[4], tenants = KEYS[5], prefix = ARGV[1] }
if ARGV[3] == '' then
  redis.call('HDEL', sk.limits, ARGV[2])
elseif ARGV[3] ~= '-' then
  redis.call('HSET', sk.limits, ARGV[2], ARGV[3])
end
local added = 0
for i = 4, #ARGV do
  local t = ARGV[i]
  if shard_runnable(sk, t) then
    if shard_ring_add(sk, t) then added = added + 1 end
  else
    -- Lowered to or below its running count (0 pauses): out of the rotation
    -- now, so the ring keeps meaning "runnable" (`shards` shows no position).
    redis.call('ZREM', sk.ring, t)
  end
end
return added
