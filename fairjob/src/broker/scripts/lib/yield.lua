--! use common
-- Fair yield's record of one running iterable job (HASH `runs`, jid ->
-- `tenant|worker|started|asked|ignored|seen|reason|last`, tenant and worker
-- encoded, times in epoch seconds; asked 0 = not asked; `last`: when an
-- earlier run of the job was last asked; worker '' for a job between runs).
-- The decision over these records is fairjob::policy::share, in Rust; this is
-- only the record's format, parsed and written where the scripts keep it (an
-- older record without `reason|last` parses).

local function yield_parse(v)
  local t, w, s, a, ig, seen, why, last = string.match(v or '',
    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|?([^|]*)|?([^|]*)$')
  if t == nil then return nil end
  return { t = t, w = w, started = tonumber(s) or 0, asked = tonumber(a) or 0,
    ignored = ig == '1', seen = tonumber(seen) or 0, reason = why or '',
    last = tonumber(last) or 0 }
end

local function yield_format(e)
  return e.t .. '|' .. e.w .. '|' .. fj_num(e.started) .. '|' .. fj_num(e.asked) .. '|'
    .. (e.ignored and '1' or '0') .. '|' .. fj_num(e.seen) .. '|' .. (e.reason or '') .. '|'
    .. fj_num(e.last or 0)
end
