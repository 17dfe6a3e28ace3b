--! use common, clock, unique
-- Add jobs to `schedule` (or `retry`), due at Redis's clock + delay, or at an
-- absolute time; or bury them in `dead` (mode 'dead', seconds ignored).
-- KEYS[1] = the zset. ARGV[1] = clock offset; then per entry: mode
-- ('in'|'at'|'dead'), seconds, payload, unique digest ('' = not unique); when
-- not '': the lock prefix, the jid, the lock's ttl ms, '1' to replace a
-- waiting holder ('0' to reject).
-- Returns, per entry, 1 when added; for a unique job whose key is held
-- {'d', holder jid} (not added), or {'r', holder jid} when the holder waited
-- in this zset and took this payload and due time (a debounce).
local now = nil
local out = {}
local i = 2
while i <= #ARGV do
  local mode, score, payload, digest = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  local u, jid, ttl, replace = nil, nil, nil, false
  if digest ~= '' then
    u = { prefix = ARGV[i] }
    jid, ttl, replace = ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1'
    i = i + 4
  end
  local holder = nil
  if u then holder = unique_take(u, digest, jid, ttl) end
  if holder then
    local waiting = nil
    if replace then waiting = unique_waiting(u, digest) end
    if waiting and redis.call('ZREM', KEYS[1], waiting) == 1 then
      payload = unique_swap_jid(payload, jid, holder)
      out[#out + 1] = { 'r', holder }
    else
      out[#out + 1] = { 'd', holder }
      score = nil
    end
  else
    out[#out + 1] = 1
  end
  if score and mode == 'dead' then
    bury(KEYS[1], redis_now(ARGV[1]), payload)
    score = nil
  elseif score and mode == 'in' then
    if not now then now = redis_now(ARGV[1]) end
    score = now + score
  end
  if score then
    redis.call('ZADD', KEYS[1], string.format('%.6f', score), payload)
    if replace then
      unique_waits_as(u, digest, payload)
      unique_touch(u, digest, ttl)
    end
  end
end
return out
