-- Move an entry from a sorted set (the promoting record) to `dead`, if it is
-- still there. KEYS[1] = source zset, KEYS[2] = dead. ARGV[1] = member,
-- ARGV[2] = dead entry, ARGV[3] = clock offset. Returns 1, or 0 if it was gone.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
bury(KEYS[2], redis_now(ARGV[3]), ARGV[2])
return 1
