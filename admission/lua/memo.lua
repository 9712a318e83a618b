-- prq admission: the memo of one script call (read after the prelude,
-- before order.lua). What it has read of the order's keys, kept in
-- step with every write it makes, so a key read again in the
-- same call costs no command (a saturated admit read the same heads,
-- tickets and virtual times again for each ticket it admitted). Every
-- access to the tickets hash and the lex, age, chat and heads zsets goes
-- through these helpers (the virtual times and stats hashes', through
-- memo_hash.lua's). With DEFER.on (admit sets it) removals from the
-- zsets wait for the end (zflush, from flushorder), one command per key;
-- with ADDS.on (register's batch) the adds to the tickets hash and the
-- zsets wait too, and a key's range read from Redis writes its own first.
-- Uses: (KEYS only)
-- Defines: DEFER, ADDS, ticketenc, ticketnew, ticketload, ticketdel, zlist,
--   zfirst, zscore, zadd, zrem, callchunks, zflush, inflow, flowlist,
--   lexadd, lexrem
local DEFER = {on = false}
-- the adds waiting: tk[id] the ticket (tko: the ids in order), z[key]
-- {s = member -> score, o = members in order} (zo: the keys in order)
local ADDS = {on = false, tk = {}, tko = {}, z = {}, zo = {}}

-- callchunks calls cmd on key with args, at most 1000 at a time (Lua's
-- stack bounds unpack), in order (an even count: pairs stay together).
local function callchunks(cmd, key, args)
  local i, reply = 1, nil
  while i <= #args do
    local j = math.min(i + 999, #args)
    reply = redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
  return reply
end

local function addpend(key, score, member)
  local a = ADDS.z[key]
  if a == nil then a = {s = {}, o = {}}; ADDS.z[key] = a; ADDS.zo[#ADDS.zo + 1] = key end
  if a.s[member] == nil then a.o[#a.o + 1] = member end
  a.s[member] = score
end
-- addwrite writes key's waiting adds.
local function addwrite(key)
  local a, args = ADDS.z[key], {}
  if a == nil then return end
  ADDS.z[key] = nil
  for _, m in ipairs(a.o) do
    if a.s[m] ~= nil then args[#args + 1] = a.s[m]; args[#args + 1] = m end
  end
  callchunks('ZADD', key, args)
end

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
  if ADDS.on then
    if ADDS.tk[id] == nil then ADDS.tko[#ADDS.tko + 1] = id end
    ADDS.tk[id] = enc
  else
    redis.call('HSET', KEYS[2], id, enc)
  end
  TK[id] = enc
end
-- ticketnew stores id's ticket unless it has one (false then); one not
-- read before, in one HSETNX.
local function ticketnew(id, enc)
  if TK[id] == nil then
    if redis.call('HSETNX', KEYS[2], id, enc) == 0 then return false end
    TK[id] = enc
    return true
  end
  if TK[id] then return false end
  ticketset(id, enc)
  return true
end
-- ticketload reads tickets in one command.
local function ticketload(ids)
  local want = {}
  for _, id in ipairs(ids) do
    if TK[id] == nil then want[#want + 1] = id end
  end
  if #want == 0 then return end
  local encs = redis.call('HMGET', KEYS[2], unpack(want))
  for i, id in ipairs(want) do TK[id] = encs[i] or false end
end
local function ticketdel(id)
  redis.call('HDEL', KEYS[2], id)
  TK[id], ADDS.tk[id] = false, nil
end

-- zsets: the first members of each, in order, with their scores
-- (ZL[key]: {{member, score}, ...}, .all when that is all of them), and
-- members' scores (ZS[key][member]; false: none). A write keeps the
-- list a true prefix: a member added inside it goes in, one added after
-- it stays out, and at a tie (ties order by member) the list ends.
-- With DEFER.on removals wait for zflush(), one command per key (ZD[key]:
-- the members, .n of them, in order .o); reads skip them.
local ZPREFIX = 4
local ZL, ZS, ZD, ZDO = {}, {}, {}, {}
local function zscores(key)
  local s = ZS[key]
  if s == nil then s = {}; ZS[key] = s end
  return s
end
local function zunpend(key, member)
  local d = ZD[key]
  if d and d[member] then d[member], d.n = nil, d.n - 1 end
end
local function zpend(key, member)
  local d = ZD[key]
  if d == nil then d = {n = 0, o = {}}; ZD[key] = d; ZDO[#ZDO + 1] = key end
  if not d[member] then
    d[member], d.n = true, d.n + 1
    d.o[#d.o + 1] = member
  end
end
local function zlistdrop(l, member)
  for i = 1, #l do
    if l[i][1] == member then table.remove(l, i) return end
  end
end
-- zlist returns key's first n members (fewer: all there are) in order.
local function zlist(key, n)
  local l = ZL[key]
  if l == nil or (#l < n and not l.all) then
    local d = ZD[key]
    local lim = math.max(n, ZPREFIX) + ((d and d.n) or 0)
    addwrite(key)
    local r = redis.call('ZRANGE', key, 0, lim - 1, 'WITHSCORES')
    local s = zscores(key)
    l = {all = #r / 2 < lim}
    for i = 1, #r, 2 do
      if not (d and d[r[i]]) then
        local sc = tonumber(r[i + 1])
        l[#l + 1] = {r[i], sc}
        s[r[i]] = sc
      end
    end
    ZL[key] = l
  end
  return l
end
local function zfirst(key)
  local f = zlist(key, 1)[1]
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
  if ADDS.on then addpend(key, score, member) else redis.call('ZADD', key, score, member) end
  zunpend(key, member)
  score = tonumber(score)
  zscores(key)[member] = score
  local l = ZL[key]
  if l == nil then return end
  zlistdrop(l, member)
  for i = 1, #l do
    if l[i][2] == score then
      for j = #l, i, -1 do l[j] = nil end
      l.all = false
      return
    elseif l[i][2] > score then
      table.insert(l, i, {member, score})
      return
    end
  end
  if l.all then l[#l + 1] = {member, score} end
end
local function zrem(key, member)
  if ADDS.z[key] then ADDS.z[key].s[member] = nil end
  if DEFER.on then zpend(key, member) else redis.call('ZREM', key, member) end
  zscores(key)[member] = false
  if ZL[key] then zlistdrop(ZL[key], member) end
end

-- zflush removes what DEFER held back and adds what ADDS did.
local function zflush()
  local tk = {}
  for _, id in ipairs(ADDS.tko) do
    if ADDS.tk[id] then tk[#tk + 1] = id; tk[#tk + 1] = ADDS.tk[id] end
  end
  callchunks('HSET', KEYS[2], tk)
  for _, key in ipairs(ADDS.zo) do addwrite(key) end
  ADDS.tk, ADDS.tko, ADDS.zo = {}, {}, {}
  for _, key in ipairs(ZDO) do
    local d, m = ZD[key], {}
    for _, x in ipairs(d.o) do
      if d[x] then m[#m + 1] = x end
    end
    callchunks('ZREM', key, m)
  end
  ZD, ZDO = {}, {}
end

-- the lex zset, per flow prefix ("class|tenant|"): its first members
-- in order (FL[prefix], all of them when .all), their tickets read
-- along in one HMGET; removals deferred as the other zsets'.
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
    -- the flow's members whose removal waits are read and skipped
    local d, np = ZD[KEYS[3]], 0
    if d then
      for _, x in ipairs(d.o) do
        if d[x] and inflow(prefix, x) then np = np + 1 end
      end
    end
    local lim = math.max(n, FLOWREAD) + np
    addwrite(KEYS[3])
    local m = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, lim)
    l = {all = #m < lim}
    local ids = {}
    for _, x in ipairs(m) do
      if not (d and d[x]) then
        l[#l + 1] = x
        local id = string.match(x, '([^|]*)$')
        if TK[id] == nil then ids[#ids + 1] = id end
      end
    end
    if #ids > 0 then
      local encs = redis.call('HMGET', KEYS[2], unpack(ids))
      for i, id in ipairs(ids) do TK[id] = encs[i] or false end
    end
    FL[prefix] = l
  end
  return l
end
-- lexless orders members as Redis orders them (bytes, then length;
-- Lua's < follows the server's locale).
local function lexless(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
-- lexadd adds m; each flow's list read keeps it, in order.
local function lexadd(m)
  zadd(KEYS[3], 0, m)
  for p, l in pairs(FL) do
    if inflow(p, m) then
      local at = l.all and #l + 1 or nil
      for i = 1, #l do
        if l[i] == m then at = nil break end
        if lexless(m, l[i]) then at = i break end
      end
      if at then table.insert(l, at, m) end
    end
  end
end
local function lexrem(m)
  if ADDS.z[KEYS[3]] then ADDS.z[KEYS[3]].s[m] = nil end
  if DEFER.on then zpend(KEYS[3], m) else redis.call('ZREM', KEYS[3], m) end
  for p, l in pairs(FL) do
    if inflow(p, m) then
      for i = 1, #l do
        if l[i] == m then table.remove(l, i) break end
      end
    end
  end
end
