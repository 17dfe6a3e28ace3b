-- Add jobs to `schedule` (or `retry`), due at Redis's clock + delay, or at an
-- absolute time; or bury them in `dead` (mode 'dead', seconds ignored).
-- KEYS[1] = the zset. ARGV[1] = clock offset; then triples: mode ('in'|'at'|'dead'),
-- seconds, payload.
local now = nil
local i = 2
while i <= #ARGV do
  local score = tonumber(ARGV[i + 1])
  if ARGV[i] == 'dead' then
    bury(KEYS[1], redis_now(ARGV[1]), ARGV[i + 2])
    score = nil
  elseif ARGV[i] == 'in' then
    if not now then now = redis_now(ARGV[1]) end
    score = now + score
  end
  if score then redis.call('ZADD', KEYS[1], string.format('%.6f', score), ARGV[i + 2]) end
  i = i + 3
end
return 1
