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

local function vt(field) return tonumber(redis.call('HGET', KEYS[8], field) or '0') or 0 end

-- flowhead returns the first ticket of a tenant's flow in a tier, or nil.
local function flowhead(class, tenant)
  local prefix = class .. '|' .. tenant .. '|'
  local m = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, 1)
  if #m == 0 then return nil end
  local id = string.match(m[1], '([^|]*)$')
  local enc = redis.call('HGET', KEYS[2], id)
  if not enc then
    redis.call('ZREM', KEYS[3], m[1]) -- a ticket without data: drop it
    return flowhead(class, tenant)
  end
  return decode(id, enc)
end

-- refresh recomputes a tenant's finish tag in its tier's heads. A flow
-- that stays backlogged starts where its last service finished; one that
-- becomes active starts no earlier than the tier's virtual time (start-
-- time fair queuing), so idling earns no credit.
local function refresh(class, tenant, backlogged)
  local h = flowhead(class, tenant)
  if h == nil then
    redis.call('ZREM', HEADS[class], tenant)
    return
  end
  local start = vt('f:' .. class .. ':' .. tenant)
  if not backlogged then start = math.max(start, vt('V:' .. class)) end
  redis.call('ZADD', HEADS[class], start + h.tokens / h.prio, tenant)
end

-- activate gives a tier that becomes backlogged its start tag.
local function activate(class)
  if redis.call('ZCARD', HEADS[class]) == 0 then
    local v = math.max(vt('t:' .. class), vt('V'))
    redis.call('HSET', KEYS[8], 't:' .. class, v)
  end
end

-- unlink removes a waiting ticket from every structure but the hash.
local function unlink(t)
  redis.call('ZREM', KEYS[9], t.id)
  redis.call('ZREM', KEYS[3], lexmember(t))
  if t.class == 'chat' then
    redis.call('ZREM', KEYS[4], t.id)
  else
    redis.call('ZREM', KEYS[18], t.id)
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
  if redis.call('HEXISTS', KEYS[2], id) == 1 then return 0 end
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
  redis.call('HSET', KEYS[2], id, enc)
  redis.call('ZADD', KEYS[9], t.enq, id)
  redis.call('HINCRBY', KEYS[11], 'in_tok:' .. t.class, t.tokens)
  redis.call('HINCRBY', KEYS[11], 'in_n:' .. t.class, 1)
  if t.class == 'chat' then
    redis.call('HSET', KEYS[11], 'chat_at', B.fmt(now)) -- a window keeps chat's share while chat uses the model
    redis.call('ZADD', KEYS[4], seq, id)
  else
    redis.call('ZADD', KEYS[18], t.enq, id)
    activate(t.class)
  end
  do
    local active = redis.call('ZSCORE', HEADS[t.class], t.tenant)
    redis.call('ZADD', KEYS[3], 0, lexmember(t))
    if not active then
      refresh(t.class, t.tenant, false)
    else
      local h = flowhead(t.class, t.tenant)
      if h ~= nil and h.id == t.id then refresh(t.class, t.tenant, true) end
    end
  end
  return 1, t.class
end
