-- prq admission: the order's operations on a ticket (read after the
-- prelude, reservation.lua and memo.lua, before the operation's file):
-- its flow's head, fair queuing's finish tags, unlinking, registering.
-- Tickets are stored encoded (ticket.lua); admit replies with
-- "via|queue|class|tenant|tokens|enq_us|key" ("|dim" instead of "|key"
-- for a reject) per admitted id, read by decodeAdmitted in ticket.go.
-- Uses: B, HEADS, decode, flowlist, lexadd, lexrem, now, rerank, stamp,
--   statadd, statset, ticketenc, ticketnew, vt, vtset, zadd, zfirst, zrem,
--   zscore
-- Defines: lexmember, flowhead, refresh, activate, unlink, smooth, register

local function lexmember(t) return t.class .. '|' .. t.tenant .. '|' .. t.rank .. '|' .. t.id end

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

-- register adds a ticket unless it has one already (waiting or
-- released): 1, and its class; else 0.
local function register(id, enc)
  local t = decode(id, enc)
  if t.enq == 0 then
    t.enq = now
    enc = stamp(enc, B.fmt(now))
  end
  local seq = 0
  if t.class == 'chat' then
    -- a tenant's chat is answered in arrival order (the next number,
    -- taken once the ticket is new)
    seq = vt('seq') + 1
    t.rank = string.format('%018d', seq)
    enc = rerank(enc, t.rank)
  end
  if not ticketnew(id, enc) then return 0 end
  if seq > 0 then vtset('seq', seq) end
  zadd(KEYS[9], t.enq, id)
  statadd('in_tok:' .. t.class, t.tokens)
  statadd('in_n:' .. t.class, 1)
  if t.class == 'chat' then
    statset('chat_at', B.fmt(now)) -- a window keeps chat's share while chat uses the model
    zadd(KEYS[4], seq, id)
  else
    zadd(KEYS[18], t.enq, id)
    activate(t.class)
  end
  do
    local active = zscore(HEADS[t.class], t.tenant)
    flowlist(t.class .. '|' .. t.tenant .. '|', 1) -- read first: the add keeps it
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
