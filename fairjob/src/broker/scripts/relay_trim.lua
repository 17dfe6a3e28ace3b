-- The pump's drain of the relay's completion list, once PostgreSQL holds the
-- ends it read (LRANGE, not a pop): removes them from the head only if the
-- head still holds exactly them. Another pump may have drained them first
-- (then nothing is removed; its write and this one are the same), and a pump
-- killed between its read and its write to PostgreSQL removed nothing, so
-- the next drain reads those ends again: none is lost.
-- KEYS[1] = completion list.
-- ARGV = the entries read, in order (at most the drain batch, 1,000).
-- Returns how many entries were removed (0 when the head differs).
local n = #ARGV
local head = redis.call('LRANGE', KEYS[1], 0, n - 1)
if #head ~= n then
  return 0
end
for i = 1, n do
  if head[i] ~= ARGV[i] then
    return 0
  end
end
redis.call('LTRIM', KEYS[1], n, -1)
return n
