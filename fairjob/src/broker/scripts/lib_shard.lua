-- Shared functions of the tenant-sharded queue, prepended to the scripts that
-- touch shards (push, shard_fetch, shard_finish, shard_limit, slot_acquire). A
-- sharded queue's keys, its inbox included, hash to one Redis Cluster slot (the
-- tag is the inbox's name); a tenant's list is `<prefix><encoded tenant>`, where the encoding
-- is the same as fairjob::broker::keys::encode (percent-encoding outside
-- [A-Za-z0-9-._~]). A tenant is in the ring (a ZSET scored by a sequence, i.e. a
-- queue without duplicates) exactly when it has pending jobs and is under its
-- running limit.

local function fj_encode(s)
  return (string.gsub(s, '[^%w%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end

local function shard_limit(sk, t)
  local l = redis.call('HGET', sk.limits, t)
  if not l then l = redis.call('HGET', sk.limits, '*') end
  if l then return tonumber(l) end
  return nil
end

local function shard_running(sk, t)
  return tonumber(redis.call('HGET', sk.running, t) or '0')
end

local function shard_runnable(sk, t)
  local limit = shard_limit(sk, t)
  if limit ~= nil and shard_running(sk, t) >= limit then return false end
  return redis.call('LLEN', sk.prefix .. t) > 0
end

-- Adds `t` at the end of the rotation unless it is in it; true when added.
local function shard_ring_add(sk, t)
  if not redis.call('ZSCORE', sk.ring, t) then
    redis.call('ZADD', sk.ring, redis.call('INCR', sk.seq), t)
    return true
  end
  return false
end

local function shard_push(sk, t, payload, front)
  if front then
    redis.call('RPUSH', sk.prefix .. t, payload)
  else
    redis.call('LPUSH', sk.prefix .. t, payload)
  end
  redis.call('SADD', sk.tenants, t)
  if shard_runnable(sk, t) then shard_ring_add(sk, t) end
end

-- Releases one running job of `t`; true when that put `t` back in the rotation
-- (the caller then wakes an idle worker).
local function shard_release(sk, t)
  local r = redis.call('HINCRBY', sk.running, t, -1)
  if r <= 0 then redis.call('HDEL', sk.running, t) end
  if shard_runnable(sk, t) then
    return shard_ring_add(sk, t)
  elseif r <= 0 and redis.call('LLEN', sk.prefix .. t) == 0 then
    redis.call('SREM', sk.tenants, t)
  end
  return false
end

-- The tenant of an inbox entry pushed by a producer that knows nothing of
-- shards: its `fair_tenant` field, or the shared shard ('') when it has none or
-- is not JSON (the worker dead-letters malformed entries when it fetches them).
-- Also says whether the entry is a slot waiter released by a freed slot
-- (`fairjob_slot_released`), which goes to the front of its tenant's list.
local function shard_tenant_of(payload)
  local ok, job = pcall(cjson.decode, payload)
  if ok and type(job) == 'table' then
    local front = job['fairjob_slot_released'] == true
    local t = job['fair_tenant']
    if type(t) == 'string' and t ~= '' then return fj_encode(t), front end
    if type(t) == 'number' and t == math.floor(t) then return string.format('%d', t), front end
    return '', front
  end
  return '', false
end

local function shard_drain_inbox(sk, inbox, max)
  for _ = 1, max do
    local e = redis.call('RPOP', inbox)
    if not e then return end
    local t, front = shard_tenant_of(e)
    shard_push(sk, t, e, front)
  end
end

-- Pops the next runnable tenant and its oldest job. A tenant found at its limit
-- (a limit lowered at runtime) is dropped from the ring: it returns when one of
-- its jobs finishes or its limit is raised. Bounded: never walks all tenants.
local function shard_reserve(sk)
  for _ = 1, 32 do
    local popped = redis.call('ZPOPMIN', sk.ring)
    if #popped == 0 then return nil end
    local t = popped[1]
    local limit = shard_limit(sk, t)
    local running = shard_running(sk, t)
    if limit == nil or running < limit then
      local job = redis.call('RPOP', sk.prefix .. t)
      if job then
        redis.call('HINCRBY', sk.running, t, 1)
        if (limit == nil or running + 1 < limit) and redis.call('LLEN', sk.prefix .. t) > 0 then
          redis.call('ZADD', sk.ring, redis.call('INCR', sk.seq), t)
        end
        return t, job
      end
    end
  end
  return nil
end

local function redis_now(offset)
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000 + (tonumber(offset) or 0)
end

local function bury(dead, now, entry)
  redis.call('ZADD', dead, string.format('%.6f', now), entry)
  redis.call('ZREMRANGEBYSCORE', dead, '-inf', string.format('(%.6f', now - 15552000))
  redis.call('ZREMRANGEBYRANK', dead, 0, -10001)
end
