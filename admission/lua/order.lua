-- prq admission, the part every operation shares: tickets wait here in
-- one global order per model; admit takes, in that order, as many as the
-- model's bucket admits (at most a budget), charging the bucket in the
-- same atomic step.
--
-- Each operation is its own script (register.lua, cancel.lua, delay.lua,
-- start.lua for started and calling, sent.lua, arrived.lua, settle.lua,
-- admit.lua, position.lua, stats.lua): Go (scripts.go) builds each from
-- ratelimit's library (B), ticket.lua (decode, stamp), this file, then
-- the operation's. Every operation takes the same KEYS (below) and
-- ARGV[1], the time in µs ("" for Redis TIME: now); its header says the
-- rest of its ARGV and its reply.
--
-- Keys (one hash tag, the model bucket's; Go: keySet in keys.go, same order):
--  K[1] bucket state      K[2] tickets hash (id -> encoded ticket)
--  K[3] lex zset         (members "class|tenant|rank|id", score 0; chat's
--                          rank is its arrival sequence)
--  K[4] chat zset (id by seq)   K[5..7] flow heads per tier (tenant by finish tag)
--  K[8] virtual times hash      K[9] age zset (id by enqueue µs)
--  K[10] released zset (id by deadline µs)   K[11] stats hash
--  K[12] reservations hash (id -> "requests tokens[ k<key>][ s[<µs>]][ c][ t][ w][ a<µs>]",
--                          s: started (a window's first start: at µs, until
--                          its call), c: called, t: its time is its call's (a
--                          window's), w: then its write's (a bound), a: its
--                          reply bounded its way from there (µs))   K[13] reservation age zset
--  K[14] delayed zset (id NUL encoded, by due µs)      K[15] paused (reason)
--  K[16] recent admission waits ("class:µs", newest first, capped)
--  K[17] flow heads of chat (tenant by finish tag)
--  K[18] batch age zset (id by enqueue µs): the aging bound's order
--  K[19 + 2i], K[20 + 2i]: the bucket state of the model's API key i
--                          (from 0; key 0's is K[1]) and why it is paused
--
-- Several API keys: each key has its own bucket state with the model's
-- limits. A ticket is charged to one key: of the keys not paused whose
-- bucket admits it now, the one with the most room left (so the load
-- spreads evenly). Its reservation remembers the key ("... k<i>"), so
-- start, settle and refund go to that key's bucket; the reply names it.
--
-- Order of one admission: chat against batch by start-time fair queuing
-- of the two classes (weights cap and 1 - cap over tokens, so chat takes
-- at most its cap of what is admitted while batch waits); inside chat,
-- start-time fair queuing across tenants; inside batch, the oldest ticket
-- past the aging bound, else the weighted tiers. Uncapped (cap 1), chat
-- goes first unless a batch ticket is past the aging bound.
--
-- Tickets are stored encoded (see ticket.lua); admit replies with
-- "via|queue|class|tenant|tokens|enq_us|key" ("|dim" instead of "|key"
-- for a reject) per admitted id, read by decodeAdmitted in ticket.go.

local TIERS = {'paid', 'trial', 'free'}
local HEADS = {paid = KEYS[5], trial = KEYS[6], free = KEYS[7], chat = KEYS[17]}

local function lexmember(t) return t.class .. '|' .. t.tenant .. '|' .. t.rank .. '|' .. t.id end

-- The memo of one script call: what it has read of the order's keys,
-- kept in step with every write it makes, so a key read again in the
-- same call costs no command (a saturated admit read the same heads,
-- tickets and virtual times again for each ticket it admitted). Every
-- access to the tickets hash, the lex, age, chat and heads zsets and the
-- virtual times hash goes through these helpers. With DEFER.on (admit
-- sets it) writes to the virtual times and the stats hashes wait for
-- flushorder(), one command per hash: admit reads neither elsewhere.
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

-- flowhead returns the first ticket of a tenant's flow in a tier, or nil.
local function flowhead(class, tenant)
  local prefix = class .. '|' .. tenant .. '|'
  while true do
    local m = flowlist(prefix, 1)[1]
    if m == nil then return nil end
    local id = string.match(m, '([^|]*)$')
    local enc = ticketenc(id)
    if enc then return decode(id, enc) end
    lexrem(m) -- a ticket without data: drop it
  end
end

-- refresh recomputes a tenant's finish tag in its tier's heads. A flow
-- that stays backlogged starts where its last service finished; one that
-- becomes active starts no earlier than the tier's virtual time (start-
-- time fair queuing), so idling earns no credit.
local function refresh(class, tenant, backlogged)
  local h = flowhead(class, tenant)
  if h == nil then
    zrem(HEADS[class], tenant)
    return
  end
  local start = vt('f:' .. class .. ':' .. tenant)
  if not backlogged then start = math.max(start, vt('V:' .. class)) end
  zadd(HEADS[class], start + h.tokens / h.prio, tenant)
end

-- activate gives a tier that becomes backlogged its start tag.
local function activate(class)
  if zfirst(HEADS[class]) == nil then
    local v = math.max(vt('t:' .. class), vt('V'))
    vtset('t:' .. class, v)
  end
end

-- unlink removes a waiting ticket from every structure but the hash.
local function unlink(t)
  zrem(KEYS[9], t.id)
  lexrem(lexmember(t))
  if t.class == 'chat' then
    zrem(KEYS[4], t.id)
  else
    zrem(KEYS[18], t.id)
  end
end

local now = B.clock(ARGV[1])

-- the model's API keys (one when the caller passes no key pairs)
local NKEYS = math.max(math.floor((#KEYS - 18) / 2), 1)
local function keystate(i)
  if #KEYS >= 19 then return KEYS[19 + 2 * i] end
  return KEYS[1]
end
local function keypaused(i)
  if #KEYS >= 20 then return KEYS[20 + 2 * i] end
  return nil
end

-- reservation reads a stored reservation "cost cost ... d<id>,<id>...[
-- k<key>][ s][ c]": its costs, its key's index (nil: a key no longer
-- configured), whether its job has started, and the ids of the
-- dimensions the costs were charged to, in order (nil: not named, by
-- position). Read the costs through B.ondims.
local function reservation(r)
  local costs, key, started, ids = {}, 0, false, nil
  for c in string.gmatch(r, '%S+') do
    local f = string.sub(c, 1, 1)
    if f == 'k' then
      key = tonumber(string.sub(c, 2))
    elseif f == 'd' then
      ids = B.readdims(c)
    elseif f == 's' then
      started = true
    elseif f == 'c' or f == 'w' or f == 'a' or f == 't' then
      -- called, written, its way bounded: nothing more to read here
    else
      costs[#costs + 1] = tonumber(c)
    end
  end
  if key == nil or key < 0 or key >= NKEYS then key = nil end
  return costs, key, started, ids
end

-- smooth folds a sample (µs) of one part of admission's look-ahead
-- into the stats hash: its mean (<name>_us, gain 1/8) and mean deviation
-- (<name>_dev, gain 1/4), as TCP smooths a round trip.
local function smooth(name, sample)
  local v = redis.call('HMGET', KEYS[11], name .. '_us', name .. '_dev')
  local m, d = tonumber(v[1] or ''), tonumber(v[2] or '')
  if m == nil then
    m, d = sample, sample / 2
  else
    d = d or 0
    d = d + (math.abs(sample - m) - d) / 4
    m = m + (sample - m) / 8
  end
  redis.call('HSET', KEYS[11], name .. '_us', math.floor(m), name .. '_dev', math.floor(d))
end

-- retimed drops a reservation's marks of what its charge's time is
-- (" t": its call's, " w": a bound on its write, " a<µs>": its way's
-- bound from there): the time moved.
local function retimed(r)
  local out = {}
  for c in string.gmatch(r, '%S+') do
    if not (c == 't' or c == 'w' or (string.sub(c, 1, 1) == 'a' and tonumber(string.sub(c, 2)))) then out[#out + 1] = c end
  end
  return table.concat(out, ' ')
end

local function register(id, enc)
  if ticketenc(id) ~= nil then return 0 end
  local t = decode(id, enc)
  if t.enq == 0 then
    t.enq = now
    enc = stamp(enc, B.fmt(now))
  end
  local seq = 0
  if t.class == 'chat' then
    -- a tenant's chat is answered in arrival order
    seq = redis.call('HINCRBY', KEYS[8], 'seq', 1)
    t.rank = string.format('%018d', seq)
    enc = rerank(enc, t.rank)
  end
  ticketset(id, enc)
  zadd(KEYS[9], t.enq, id)
  statadd('in_tok:' .. t.class, t.tokens)
  statadd('in_n:' .. t.class, 1)
  if t.class == 'chat' then
    redis.call('HSET', KEYS[11], 'chat_at', B.fmt(now)) -- a window keeps chat's share while chat uses the model
    zadd(KEYS[4], seq, id)
  else
    zadd(KEYS[18], t.enq, id)
    activate(t.class)
  end
  do
    local active = zscore(HEADS[t.class], t.tenant)
    lexadd(lexmember(t))
    if not active then
      refresh(t.class, t.tenant, false)
    else
      local h = flowhead(t.class, t.tenant)
      if h ~= nil and h.id == t.id then refresh(t.class, t.tenant, true) end
    end
  end
  return 1, t.class
end
