-- prq admission: the memo of one script call (read after the prelude,
-- before order.lua). What it has read of the order's keys, kept in
-- step with every write it makes, so a key read again in the
-- same call costs no command (a saturated admit read the same heads,
-- tickets and virtual times again for each ticket it admitted). Every
-- access to the tickets hash, the lex, age, chat and heads zsets and the
-- virtual times hash goes through these helpers. With DEFER.on (admit
-- sets it) writes to the virtual times and the stats hashes wait for
-- flushorder(), one command per hash: admit reads neither elsewhere.
-- Uses: (KEYS only)
-- Defines: DEFER, ticketenc, ticketset, ticketdel, zfirst, zscore, zadd,
--   zrem, inflow, flowlist, lexadd, lexrem, vt, vtload, vtset, vtdel,
--   vtincr, statadd, callchunks, flushorder
local DEFER = {on = false}

-- tickets hash: id -> encoded ticket (false: none)
local TK = {}
local function ticketenc(id)
  local e = TK[id]
  if e == nil then
    e = redis.call('HGET', KEYS[2], id) or false
    TK[id] = e
  end
  return e or nil
end
local function ticketset(id, enc)
  redis.call('HSET', KEYS[2], id, enc)
  TK[id] = enc
end
local function ticketdel(id)
  redis.call('HDEL', KEYS[2], id)
  TK[id] = false
end

-- zsets: each one's first member and score (ZF[key]: {member, score};
-- false: empty) and members' scores (ZS[key][member]; false: none).
-- A write keeps the first where it must stay (a member after it added
-- or removed) and forgets it otherwise (ties order by member).
local ZF, ZS = {}, {}
local function zscores(key)
  local s = ZS[key]
  if s == nil then s = {}; ZS[key] = s end
  return s
end
local function zfirst(key)
  local f = ZF[key]
  if f == nil then
    local r = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    f = false
    if #r > 0 then
      f = {r[1], tonumber(r[2])}
      zscores(key)[r[1]] = f[2]
    end
    ZF[key] = f
  end
  if f then return f[1], f[2] end
  return nil
end
local function zscore(key, member)
  local s = zscores(key)
  local v = s[member]
  if v == nil then
    v = tonumber(redis.call('ZSCORE', key, member) or '') or false
    s[member] = v
  end
  return v or nil
end
local function zadd(key, score, member)
  redis.call('ZADD', key, score, member)
  score = tonumber(score)
  zscores(key)[member] = score
  local f = ZF[key]
  if f == false or (f and score < f[2]) then
    ZF[key] = {member, score}
  elseif f and (f[1] == member or score == f[2]) then
    ZF[key] = nil
  end
end
local function zrem(key, member)
  redis.call('ZREM', key, member)
  zscores(key)[member] = false
  local f = ZF[key]
  if f and f[1] == member then ZF[key] = nil end
end

-- the lex zset, per flow prefix ("class|tenant|"): its first members
-- in order (FL[prefix], all of them when .all), their tickets read
-- along in one HMGET.
local FLOWREAD = 4
local FL = {}
-- inflow says whether member m is in prefix p's range ['[p', '[p\255'].
local function inflow(p, m)
  if string.sub(m, 1, #p) ~= p then return false end
  local rest = string.sub(m, #p + 1)
  return rest == '' or rest == '\255' or string.byte(rest, 1) ~= 255
end
local function flowlist(prefix, n)
  local l = FL[prefix]
  if l == nil or (#l < n and not l.all) then
    local lim = math.max(n, FLOWREAD)
    local m = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, lim)
    l = {all = #m < lim}
    local ids = {}
    for i, x in ipairs(m) do
      l[i] = x
      local id = string.match(x, '([^|]*)$')
      if TK[id] == nil then ids[#ids + 1] = id end
    end
    if #ids > 0 then
      local encs = redis.call('HMGET', KEYS[2], unpack(ids))
      for i, id in ipairs(ids) do TK[id] = encs[i] or false end
    end
    FL[prefix] = l
  end
  return l
end
local function lexadd(m)
  redis.call('ZADD', KEYS[3], 0, m)
  for p in pairs(FL) do
    if inflow(p, m) then FL[p] = nil end
  end
end
local function lexrem(m)
  redis.call('ZREM', KEYS[3], m)
  for p, l in pairs(FL) do
    if inflow(p, m) then
      for i = 1, #l do
        if l[i] == m then table.remove(l, i) break end
      end
    end
  end
end

-- the virtual times hash (numbers; 0 for a field not there), VTR[f]
-- whether Redis has f (nil: not known) and, deferred, the fields to
-- write (VTW[f]: true set, false delete) in the order first written.
local VT, VTR, VTW, VTO = {}, {}, {}, {}
local function vtread(field, raw)
  VT[field] = tonumber(raw or '0') or 0
  VTR[field] = raw ~= false and raw ~= nil
end
local function vt(field)
  if VT[field] == nil then vtread(field, redis.call('HGET', KEYS[8], field)) end
  return VT[field]
end
-- vtload reads fields in one command.
local function vtload(fields)
  local want = {}
  for _, f in ipairs(fields) do
    if VT[f] == nil then want[#want + 1] = f end
  end
  if #want == 0 then return end
  local v = redis.call('HMGET', KEYS[8], unpack(want))
  for i, f in ipairs(want) do vtread(f, v[i]) end
end
local function vtpend(field, set)
  if VTW[field] == nil then VTO[#VTO + 1] = field end
  VTW[field] = set
end
local function vtset(field, v)
  VT[field] = v
  if DEFER.on then
    vtpend(field, true)
  else
    redis.call('HSET', KEYS[8], field, v)
    VTR[field] = true
  end
end
local function vtdel(field)
  VT[field] = 0
  if DEFER.on then
    vtpend(field, false)
  elseif VTR[field] ~= false then
    redis.call('HDEL', KEYS[8], field)
    VTR[field] = false
  end
end
local function vtincr(field, n)
  if DEFER.on then
    vtset(field, vt(field) + n)
  else
    VT[field] = redis.call('HINCRBY', KEYS[8], field, n)
    VTR[field] = true
  end
end

-- the stats hash's counters: deferred, the sums to add per field, in
-- the order first added.
local SA, SO = {}, {}
local function statadd(field, n)
  if not DEFER.on then
    redis.call('HINCRBY', KEYS[11], field, n)
    return
  end
  if SA[field] == nil then
    SA[field] = 0
    SO[#SO + 1] = field
  end
  SA[field] = SA[field] + n
end

-- callchunks calls cmd on key with args, at most 1000 at a time (Lua's
-- stack bounds unpack), in order (an even count: pairs stay together).
local function callchunks(cmd, key, args)
  local i = 1
  while i <= #args do
    local j = math.min(i + 999, #args)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- flushorder writes what DEFER held back.
local function flushorder()
  local set, del = {}, {}
  for _, f in ipairs(VTO) do
    if VTW[f] then
      set[#set + 1] = f
      set[#set + 1] = VT[f]
    elseif VTR[f] ~= false then
      del[#del + 1] = f
    end
  end
  if #del > 0 then callchunks('HDEL', KEYS[8], del) end
  if #set > 0 then callchunks('HSET', KEYS[8], set) end
  for _, f in ipairs(VTO) do VTR[f] = VTW[f] end
  VTW, VTO = {}, {}
  if #SO > 2 then
    -- a sum's read and write, as HINCRBY would (integers stay integers)
    local v = redis.call('HMGET', KEYS[11], unpack(SO))
    local args = {}
    for i, f in ipairs(SO) do
      args[#args + 1] = f
      args[#args + 1] = (tonumber(v[i] or '0') or 0) + SA[f]
    end
    redis.call('HSET', KEYS[11], unpack(args))
  else
    for _, f in ipairs(SO) do redis.call('HINCRBY', KEYS[11], f, SA[f]) end
  end
  SA, SO = {}, {}
end
