-- Add jobs to `schedule`, due at Redis's clock + delay, or at an absolute time.
-- KEYS[1] = schedule zset. ARGV[1] = clock offset; then triples: mode ('in'|'at'),
-- seconds, payload.
local now = nil
local i = 2
while i <= #ARGV do
  local score = tonumber(ARGV[i + 1])
  if ARGV[i] == 'in' then
    if not now then now = redis_now(ARGV[1]) end
    score = now + score
  end
  redis.call('ZADD', KEYS[1], string.format('%.6f', score), ARGV[i + 2])
  i = i + 3
end
return 1
