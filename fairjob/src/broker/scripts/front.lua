--! use common
-- Put a job at the front of its plain queue (next to run) and wake an idle
-- worker, in the queue's slot (Redis Cluster mode): a job put back by its
-- worker, which also leaves its in-progress record here, fenced by its token;
-- or a released slot waiter.
-- KEYS[1] = queue list, KEYS[2] = wake list, KEYS[3] (optional) = in-progress hash.
-- ARGV[1] = payload, ARGV[2] = token (with KEYS[3]), ARGV[3] = 'back' to put
--   it at the tail instead (a job that yielded).
-- Returns 1, or 0 when fenced (the token was gone: nothing changed).
if #KEYS == 3 and redis.call('HDEL', KEYS[3], ARGV[2]) == 0 then return 0 end
if ARGV[3] == 'back' then
  redis.call('LPUSH', KEYS[1], ARGV[1])
else
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
fj_wake(KEYS[2])
return 1
