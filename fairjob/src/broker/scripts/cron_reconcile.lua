-- Reconcile the schedules declared in code with the stored ones, in one step
-- (several workers starting at once leave one entry per schedule; the last
-- to start decides): code schedules no longer declared are removed, declared
-- ones are created or replaced (a changed one gets a new next fire time),
-- run-time schedules of other names are kept.
-- KEYS[1] = defs hash, KEYS[2] = due zset, KEYS[3] = code set.
-- ARGV[1] = state key prefix (a schedule's state key is the prefix and its
-- encoded name: `Keys::cron_state`, in the same slot), ARGV[2] = count, then
-- per schedule: name, entry JSON, next fire time (s, '' = never).
-- Returns the names removed.
local states = { prefix = ARGV[1] }
local declared = {}
local ai = 3
for i = 1, tonumber(ARGV[2]) do
  local name, entry, nxt = ARGV[ai], ARGV[ai + 1], ARGV[ai + 2]
  ai = ai + 3
  declared[name] = true
  local old = redis.call('HGET', KEYS[1], name)
  redis.call('HSET', KEYS[1], name, entry)
  redis.call('SADD', KEYS[3], name)
  local encoded = fj_encode(name)
  local paused = redis.call('HGET', states.prefix .. encoded, 'paused') == '1'
  if not paused then
    if nxt == '' then
      redis.call('ZREM', KEYS[2], name)
    elseif old ~= entry or not redis.call('ZSCORE', KEYS[2], name) then
      redis.call('ZADD', KEYS[2], nxt, name)
    end
  end
end
local removed = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if not declared[name] then
    redis.call('HDEL', KEYS[1], name)
    redis.call('ZREM', KEYS[2], name)
    redis.call('SREM', KEYS[3], name)
    local encoded = fj_encode(name)
    redis.call('DEL', states.prefix .. encoded)
    removed[#removed + 1] = name
  end
end
return removed
