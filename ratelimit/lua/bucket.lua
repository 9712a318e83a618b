-- KEYS[1] bucket state hash   KEYS[2] reservation key (per job id)
-- ARGV[1] op: reserve | settle | sync | penalize | window | peek
-- ARGV[2] now in µs, or "" for Redis TIME
-- ARGV[3..] dimensions (see B.load), then reserve: ttl_ms; settle: policy;
-- sync: age_us, optionally upto_us (the latest the report may be as of)
-- Reply: {code, value, now µs}: reserve 1 reserved, 2 a duplicate (the
-- job's reservation is there), 0 value µs to wait, < 0 never fits (value
-- the dimension); settle 1 settled, 0 no reservation; sync 1 lowered, 0
-- not; penalize 1; window 1 switched to a window, 0 not; peek {now µs,
-- available per dimension, ...}
-- Run after LuaLibrary.
-- Uses: B
local now = B.clock(ARGV[2])
local op = ARGV[1]
local st, tail = B.load(KEYS[1], ARGV, 2, now)

if op == 'reserve' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {2, 0, B.fmt(now)} end
  local w, dim = B.wait(st, st.val, nil)
  if w < 0 then return {w, dim, B.fmt(now)} end
  if w > 0 then return {0, w, B.fmt(now)} end
  B.take(st, st.val)
  B.save(st)
  local costs = {}
  for i = 1, st.n do costs[i] = B.fmt(st.val[i]) end
  -- the dimensions charged, by id: a limit configured or dropped while
  -- the reservation is open moves no refund to another dimension. As
  -- "@d…": a reader from before ids skips what starts with '@'
  if st.n > 0 then costs[#costs + 1] = '@' .. B.dimsmark(st) end
  -- the charge's time: a window gives a refund back in its slot
  costs[#costs + 1] = '@' .. B.fmt(now)
  redis.call('SET', KEYS[2], table.concat(costs, ' '), 'PX', tonumber(ARGV[tail + 1]))
  return {1, 0, B.fmt(now)}
elseif op == 'settle' then
  local r = redis.call('GET', KEYS[2])
  if not r then return {0, 0, B.fmt(now)} end
  -- policy: refund (usage replaces the estimate), debt (usage beyond
  -- the estimate is added), estimate (the estimate stays)
  local policy = ARGV[tail + 1]
  local at = tonumber(string.match(r, '@(%d+)'))
  local charged, ids = {}, nil
  for c in string.gmatch(r, '%S+') do
    local f = string.sub(c, 1, 1)
    if f == '@' then
      if string.sub(c, 2, 2) == 'd' then ids = B.readdims(string.sub(c, 2)) end
    else
      charged[#charged + 1] = tonumber(c)
    end
  end
  charged = B.ondims(charged, ids, st)
  for i = 1, st.n do
    -- estimate minus actual (an unknown actual, -1, leaves the charge)
    if charged[i] ~= nil then
      local delta = charged[i] - st.val[i]
      if st.val[i] >= 0 and (policy == 'refund' or (delta < 0 and policy == 'debt')) then B.give(st, i, delta, at) end
    end
  end
  B.save(st)
  redis.call('DEL', KEYS[2])
  return {1, 0, B.fmt(now)}
elseif op == 'sync' then
  -- val is the provider's remaining count, -1 when unknown, as of age µs
  -- ago (when the provider admitted the call), or as late as upto µs ago
  -- (B.lower). Lower to that, never raise.
  local age = tonumber(ARGV[tail + 1] or '0') or 0
  if age < 0 then age = 0 end
  local upto = tonumber(ARGV[tail + 2] or '')
  if upto ~= nil and upto < 0 then upto = 0 end
  local lowered = 0
  for i = 1, st.n do
    if st.val[i] >= 0 and B.lower(st, i, st.val[i], age, upto) then lowered = 1 end
  end
  if lowered == 1 then B.save(st) end
  return {lowered, 0, B.fmt(now)}
elseif op == 'penalize' then
  -- val is the wait in µs: nothing is admitted until it has passed
  for i = 1, st.n do B.block(st, i, st.val[i]) end
  B.save(st)
  return {1, 0, B.fmt(now)}
elseif op == 'window' then
  -- an auto limiter's provider counts in a window: switch (once)
  if B.towindow(st, ARGV, 2) then return {1, 0, B.fmt(now)} end
  return {0, 0, B.fmt(now)}
elseif op == 'peek' then
  local out = {B.fmt(now)}
  for i, v in ipairs(B.available(st)) do out[i + 1] = B.fmt(v) end
  return out
end
return redis.error_reply('bucket: unknown op ' .. tostring(op))
