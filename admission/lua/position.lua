-- admission position: where the first (in its flow's order) of some
-- tickets waiting here stands.
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] mode (strict|weighted),
-- ARGV[3..5] the weights of paid, trial and free, ARGV[6..] the ids.
-- Reply: {now, found, ahead, class, rate (admissions/s, "" unknown)}.
-- An estimate of admission's order, not a replay of it: the ticket's
-- own flow ahead of it; each other tenant of its class up to as many
-- turns (fair queuing); chat; and the other tiers, all of a higher
-- one when strict, by weight when weighted.
-- Uses: B, HEADS, TIERS, decode, lexmember, now
local mode = ARGV[2]
local weight = {paid = tonumber(ARGV[3]), trial = tonumber(ARGV[4]), free = tonumber(ARGV[5])}
local found, first, firstm = 0, nil, nil
for i = 6, #ARGV do
  local enc = redis.call('HGET', KEYS[2], ARGV[i])
  if enc then
    local t = decode(ARGV[i], enc)
    local m = lexmember(t)
    if redis.call('ZSCORE', KEYS[3], m) then -- waiting, not released
      found = found + 1
      if firstm == nil or m < firstm then first, firstm = t, m end
    end
  end
end
-- admission's rate, sampled at most every 10 s, halved toward each new sample
local n = 0
for _, v in ipairs(redis.call('HMGET', KEYS[11], 'adm_n:chat', 'adm_n:paid', 'adm_n:trial', 'adm_n:free')) do
  n = n + (tonumber(v or '0') or 0)
end
local q = redis.call('HMGET', KEYS[11], 'q_at', 'q_n', 'q_rate')
local qat, qn, rate = tonumber(q[1] or ''), tonumber(q[2] or ''), tonumber(q[3] or '')
if qat == nil or now < qat then
  redis.call('HSET', KEYS[11], 'q_at', B.fmt(now), 'q_n', B.fmt(n))
elseif now - qat >= 10000000 then
  local r = (n - qn) * 1000000 / (now - qat)
  if rate == nil then rate = r else rate = rate + (r - rate) / 2 end
  redis.call('HSET', KEYS[11], 'q_at', B.fmt(now), 'q_n', B.fmt(n), 'q_rate', string.format('%.6f', rate))
end
local ratestr = ''
if rate ~= nil then ratestr = string.format('%.6f', rate) end
if first == nil then return {B.fmt(now), 0, 0, '', ratestr} end
local t = first
local prefix = t.class .. '|' .. t.tenant .. '|'
local inflow = redis.call('ZLEXCOUNT', KEYS[3], '[' .. prefix, '(' .. firstm)
local same = inflow
for _, tenant in ipairs(redis.call('ZRANGE', HEADS[t.class], 0, 199)) do
  if tenant ~= t.tenant then
    local p = t.class .. '|' .. tenant .. '|'
    same = same + math.min(redis.call('ZLEXCOUNT', KEYS[3], '[' .. p, '[' .. p .. '\255'), inflow + 1)
  end
end
local ahead = same
if t.class ~= 'chat' then
  ahead = ahead + redis.call('ZCARD', KEYS[4])
  local higher = true
  for _, tier in ipairs(TIERS) do
    if tier == t.class then
      higher = false
    else
      local c = redis.call('ZLEXCOUNT', KEYS[3], '[' .. tier .. '|', '[' .. tier .. '|\255')
      if mode == 'strict' then
        if higher then ahead = ahead + c end
      elseif (weight[t.class] or 0) > 0 then
        ahead = ahead + math.min(c, math.floor(same * (weight[tier] or 0) / weight[t.class]))
      end
    end
  end
end
return {B.fmt(now), found, ahead, t.class, ratestr}
