-- The testing mode's clock include (fairjob::testing::ScriptClock), in place
-- of lib/clock.lua: Redis's clock, unless the test froze it for the scripts
-- whose first key hashes where this one does: `fairjob-test-clock{<the hash
-- tag of KEYS[1]>}` holds µs (the key is in KEYS[1]'s cluster slot).

local function fj_time()
  local k = KEYS[1] or ''
  local tag = nil
  local s = string.find(k, '{', 1, true)
  if s then
    local e = string.find(k, '}', s + 1, true)
    if e and e > s + 1 then tag = string.sub(k, s + 1, e - 1) end
  end
  local v = redis.call('GET', 'fairjob-test-clock{' .. (tag or k) .. '}')
  if v then
    local us = tonumber(v)
    return math.floor(us / 1000000), us % 1000000
  end
  local t = redis.call('TIME')
  return tonumber(t[1]), tonumber(t[2])
end

-- Microseconds.
local function fj_now_us()
  local s, us = fj_time()
  return s * 1000000 + us
end

-- Milliseconds.
local function fj_now_ms()
  local s, us = fj_time()
  return s * 1000 + math.floor(us / 1000)
end

-- Epoch seconds (a float), moved by `offset` seconds (tests' clock offset).
local function redis_now(offset)
  local s, us = fj_time()
  return s + us / 1000000 + (tonumber(offset) or 0)
end
