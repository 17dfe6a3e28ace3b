-- A relay's claims before its push, fenced by the relay's epoch: when the
-- epoch key no longer holds the epoch the relay read (Redis lost data, or
-- another relay started a new epoch), nothing is staged and the relay
-- re-checks before pushing anything.
-- KEYS[1] = staged record (zset), KEYS[2] = epoch key.
-- ARGV[1] = the epoch, ARGV[2] = now (ms), ARGV[3..] = jids.
-- Returns 1 when staged, 0 when the epoch did not match.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[i])
end
return 1
