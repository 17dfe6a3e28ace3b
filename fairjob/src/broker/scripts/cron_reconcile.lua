--! use common
-- One bounded step of a start-up reconciliation of the schedules declared in
-- code with the stored ones. A reconciliation is many steps (each a chunk of
-- schedules, so no step holds Redis long) owned by one token: the worker that
-- started it `SET` the owner key to its token first, and every step checks it
-- still owns the reconciliation, else stops ('superseded': a worker that
-- started later took over and applies its own declarations from the start).
-- So of several workers starting at once, the last to take ownership decides,
-- and no step of an earlier one writes after it took over.
-- Step 'apply': declared schedules are created or replaced (a changed one gets
-- a new next fire time, a paused one stays paused) and listed in the owner's
-- declared set. Step 'sweep': one SSCAN page of the code set; code schedules
-- not in the declared set are removed. Run-time schedules (not in the code
-- set) are never touched.
-- KEYS[1] = defs hash, KEYS[2] = due zset, KEYS[3] = code set, KEYS[4] =
-- owner key, KEYS[5] = the owner's declared set.
-- ARGV[1] = 'apply' or 'sweep', ARGV[2] = token, ARGV[3] = state key prefix
-- (a schedule's state key is the prefix and its encoded name:
-- `Keys::cron_state`, in the same slot), ARGV[4] = the declared set's life
-- (ms).
-- apply: ARGV[5] = count, then per schedule: name, entry JSON, next fire time
--   (s, '' = never). Returns {'ok'} or {'superseded'}.
-- sweep: ARGV[5] = SSCAN cursor, ARGV[6] = page size. Returns {'superseded'} or
--   {next cursor, removed names...}; at cursor '0' the declared set is unlinked (freed
--   in the background: it may hold thousands of names) and the owner key deleted.
if redis.call('GET', KEYS[4]) ~= ARGV[2] then return { 'superseded' } end
local states = { prefix = ARGV[3] }
if ARGV[1] == 'apply' then
  local ai = 6
  for i = 1, tonumber(ARGV[5]) do
    local name, entry, nxt = ARGV[ai], ARGV[ai + 1], ARGV[ai + 2]
    ai = ai + 3
    local old = redis.call('HGET', KEYS[1], name)
    redis.call('HSET', KEYS[1], name, entry)
    redis.call('SADD', KEYS[3], name)
    redis.call('SADD', KEYS[5], name)
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
  redis.call('PEXPIRE', KEYS[5], ARGV[4])
  return { 'ok' }
end
local page = redis.call('SSCAN', KEYS[3], ARGV[5], 'COUNT', tonumber(ARGV[6]))
local out = { page[1] }
for _, name in ipairs(page[2]) do
  if redis.call('SISMEMBER', KEYS[5], name) == 0 then
    redis.call('HDEL', KEYS[1], name)
    redis.call('ZREM', KEYS[2], name)
    redis.call('SREM', KEYS[3], name)
    local encoded = fj_encode(name)
    redis.call('DEL', states.prefix .. encoded)
    out[#out + 1] = name
  end
end
if page[1] == '0' then
  redis.call('UNLINK', KEYS[5])
  redis.call('DEL', KEYS[4])
end
return out
