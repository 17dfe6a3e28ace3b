-- Redis's clock, the one place a script reads it (TIME), so every host
-- agrees. It moves during a call: a function that needs the time reads it
-- again. fairjob::testing can assemble the scripts with a frozen clock
-- instead of this include (the differential test of tests/tests/twins.rs);
-- nothing else differs.

-- Seconds and microseconds.
local function fj_time()
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
