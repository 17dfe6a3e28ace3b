-- Unique jobs (the twin of fairjob::policy::unique; options in wire/unique.rs). A lock is a HASH
-- `<prefix><digest>` in the cluster slot of the job's queue (the prefix comes
-- from ARGV: `fairjob:{<queue key>}:unique:`), expiring after the job's
-- `unique_for`: `j` = the jid that holds the key; for on_conflict = replace,
-- `p` = the holder's payload as it waits (in its queue list or `schedule`), so
-- a replacing push can find it. A lock is released only by its own jid.

-- Takes the lock for `jid`. Returns nil when taken (or already held by
-- `jid`), else the jid that holds it.
local function unique_take(u, digest, jid, ttl_ms)
  local lock = u.prefix .. digest
  local holder = redis.call('HGET', lock, 'j')
  if holder and holder ~= jid then return holder end
  if not holder then
    redis.call('HSET', lock, 'j', jid)
    redis.call('PEXPIRE', lock, ttl_ms)
  end
  return nil
end

-- Records where the holder waits (replace mode): its payload as stored.
local function unique_waits_as(u, digest, payload)
  local lock = u.prefix .. digest
  redis.call('HSET', lock, 'p', payload)
end

-- The holder's waiting payload (replace mode), or nil.
local function unique_waiting(u, digest)
  local lock = u.prefix .. digest
  local p = redis.call('HGET', lock, 'p')
  if p then return p end
  return nil
end

-- Restarts the lock's life (a replaced job waits anew).
local function unique_touch(u, digest, ttl_ms)
  local lock = u.prefix .. digest
  redis.call('PEXPIRE', lock, ttl_ms)
end

-- Releases the lock if `jid` holds it. Returns 1 if released.
local function unique_release(u, digest, jid)
  local lock = u.prefix .. digest
  if redis.call('HGET', lock, 'j') == jid then
    redis.call('DEL', lock)
    return 1
  end
  return 0
end

-- `s` with the payload's `"jid":"<from>"` changed to `<to>` (jids are hex).
local function unique_swap_jid(s, from, to)
  local pat = '"jid":"' .. from .. '"'
  local i, j = string.find(s, pat, 1, true)
  if not i then return s end
  return string.sub(s, 1, i - 1) .. '"jid":"' .. to .. '"' .. string.sub(s, j + 1)
end
