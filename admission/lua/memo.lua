-- prq admission: the memo of one script call (read after the prelude,
-- before order.lua). What it has read of the order's keys, kept in
-- step with every write it makes, so a key read again in the
-- same call costs no command (a saturated admit read the same heads,
-- tickets and virtual times again for each ticket it admitted). Every
-- access to the tickets hash and the lex, age, chat and heads zsets goes
-- through these helpers (the virtual times and stats hashes', through
-- memo_hash.lua's). With DEFER.on (admit sets it) removals from the
-- zsets wait for the end (zflush, from flushorder), one command per key.
-- Uses: (KEYS only)
-- Defines: DEFER, ticketenc, ticketset, ticketdel, zlist, zfirst, zscore,
--   zadd, zrem, callchunks, zflush, inflow, flowlist, lexadd, lexrem
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
  redis.call('ZADD', key, score, member)
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
  if DEFER.on then zpend(key, member) else redis.call('ZREM', key, member) end
  zscores(key)[member] = false
  if ZL[key] then zlistdrop(ZL[key], member) end
end

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

-- zflush removes what DEFER held back.
local function zflush()
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
local function lexadd(m)
  redis.call('ZADD', KEYS[3], 0, m)
  zunpend(KEYS[3], m)
  for p in pairs(FL) do
    if inflow(p, m) then FL[p] = nil end
  end
end
local function lexrem(m)
  if DEFER.on then zpend(KEYS[3], m) else redis.call('ZREM', KEYS[3], m) end
  for p, l in pairs(FL) do
    if inflow(p, m) then
      for i = 1, #l do
        if l[i] == m then table.remove(l, i) break end
      end
    end
  end
end
