-- Helpers every kind of script may use: the key encoding, wake-ups, number
-- formatting, many-field hash commands, length-prefixed entries and the dead
-- set. No rule of fairjob's lives here.

-- The same encoding as fairjob::broker::keys::encode (percent-encoding
-- outside [A-Za-z0-9-._~]).
local function fj_encode(s)
  return (string.gsub(s, '[^%w%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end

-- Leaves one wake-up token on `key` for an idle worker (one at most: a list
-- of length 1, however many pushes).
local function fj_wake(key)
  redis.call('LPUSH', key, '1')
  redis.call('LTRIM', key, 0, 0)
end

local function fj_num(x)
  return string.format('%.17g', x)
end

-- HMGET, HSET and HDEL of many fields, in parts (Lua's stack bounds
-- unpack); HMGET's replies concatenated.
local function fj_hmget(key, fields)
  local out = {}
  for i = 1, #fields, 1000 do
    local r = redis.call('HMGET', key, unpack(fields, i, math.min(#fields, i + 999)))
    for _, v in ipairs(r) do out[#out + 1] = v end
  end
  return out
end

local function fj_hset(key, pairs_flat)
  for i = 1, #pairs_flat, 1000 do
    redis.call('HSET', key, unpack(pairs_flat, i, math.min(#pairs_flat, i + 999)))
  end
end

local function fj_hdel(key, fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', key, unpack(fields, i, math.min(#fields, i + 999)))
  end
end

-- The fields of a length-prefixed entry ("<len>:<bytes>" each), as slot and
-- rate limiters keep their waiters: jid, queue name, encoded queue name,
-- payload (see fairjob::broker::slots::waiter_entry_of).
local function fj_fields(e)
  local out, i = {}, 1
  while i <= #e do
    local colon = string.find(e, ':', i, true)
    local n = tonumber(string.sub(e, i, colon - 1))
    out[#out + 1] = string.sub(e, colon + 1, colon + n)
    i = colon + n + 1
  end
  return out
end

-- Sidekiq's dead set: a buried entry at `now` (epoch seconds), entries older
-- than 180 days and all but the newest 10,000 dropped.
local function bury(dead, now, entry)
  redis.call('ZADD', dead, string.format('%.6f', now), entry)
  redis.call('ZREMRANGEBYSCORE', dead, '-inf', string.format('(%.6f', now - 15552000))
  redis.call('ZREMRANGEBYRANK', dead, 0, -10001)
end
