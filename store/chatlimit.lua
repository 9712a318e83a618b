-- prq chat limits: an exact sliding-window log per user and per pull
-- request, decided atomically on Redis's clock, with at most one polite
-- refusal while a limit holds.
--
-- KEYS (one hash tag, the installation's; Go: chatKeys in chatlimit.go):
--  K[1] the user's log (zset: comment id by µs)   K[2] the PR's log
--  K[3] the user's refusal marker (string: "comment id|until µs")
--  K[4] the PR's refusal marker
-- ARGV: now_us ('' = Redis TIME), window_us, per_user, per_pr (0 = no
-- limit), comment id
-- Reply: {allowed (0/1), retry_at_us, refuse (0/1)}

local now
if ARGV[1] ~= nil and ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local window = tonumber(ARGV[2])
local limits = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local member = ARGV[5]
local function fmt(x) return string.format('%.0f', x) end

for i = 1, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', fmt(now - window))
end
for i = 1, 2 do
  -- a redelivered comment was counted already
  if redis.call('ZSCORE', KEYS[i], member) then return {1, '0', 0} end
end

local over, free = {}, {}
local retry = 0
for i = 1, 2 do
  local lim = limits[i]
  if lim > 0 then
    local n = redis.call('ZCARD', KEYS[i])
    if n >= lim then
      -- the comment that must leave the window before one more fits
      local e = redis.call('ZRANGE', KEYS[i], n - lim, n - lim, 'WITHSCORES')
      local at = tonumber(e[2]) + window
      over[#over + 1] = i
      free[i] = at
      if at > retry then retry = at end
    end
  end
end

if #over == 0 then
  for i = 1, 2 do
    if limits[i] > 0 then
      redis.call('ZADD', KEYS[i], now, member)
      redis.call('PEXPIRE', KEYS[i], math.floor(window / 1000) + 1000)
    end
  end
  return {1, '0', 0}
end

-- refused: politely only if no refusal was sent while this limit holds
-- (or this very comment is the one refused, delivered again)
local refuse = 1
for _, i in ipairs(over) do
  local m = redis.call('GET', KEYS[i + 2])
  if m then
    local id, untilus = string.match(m, '^(.*)|(%d+)$')
    if id ~= member and tonumber(untilus or '0') > now then refuse = 0 end
  end
end
if refuse == 1 then
  for _, i in ipairs(over) do
    -- the marker holds while the limit does; the TTL only tidies up
    redis.call('SET', KEYS[i + 2], member .. '|' .. fmt(free[i]), 'PX', math.floor(window / 1000) + 1000)
  end
end
return {0, fmt(retry), refuse}
