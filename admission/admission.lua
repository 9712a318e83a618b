-- prq admission: tickets wait here in one global order per model; one
-- call admits, in that order, as many as the model's bucket admits (at
-- most a budget), charging the bucket in the same atomic step.
--
-- Runs after ratelimit's library (B) and ticket.lua (decode, stamp).
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

local op = ARGV[1]
local now = B.clock(ARGV[2])

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

-- reservation reads a stored reservation "cost cost ...[ k<key>][ s][ c]": its
-- costs, its key's index (nil: a key no longer configured) and whether
-- its job has started.
local function reservation(r)
  local costs, key, started = {}, 0, false
  for c in string.gmatch(r, '%S+') do
    local f = string.sub(c, 1, 1)
    if f == 'k' then
      key = tonumber(string.sub(c, 2))
    elseif f == 's' then
      started = true
    elseif f == 'c' or f == 'w' or f == 'a' or f == 't' then
      -- called, written, its way bounded: nothing more to read here
    else
      costs[#costs + 1] = tonumber(c)
    end
  end
  if key == nil or key < 0 or key >= NKEYS then key = nil end
  return costs, key, started
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

if op == 'register' then
  -- ARGV: op, now, id, encoded ticket, wake channel
  -- the wake names the ticket's class (the loops skip a batch one while
  -- the model's head waits for tokens) and when it came (an attempt
  -- that began later saw it)
  local n, class = register(ARGV[3], ARGV[4])
  if n == 1 and ARGV[5] ~= nil and ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[5], 't|' .. class .. '|' .. B.fmt(now)) end
  return n

elseif op == 'cancel' then
  -- ARGV: op, now, id[, 'waiting']: with 'waiting', a ticket admitted
  -- already (released, its task on its way) is left alone (reply 0)
  local enc = redis.call('HGET', KEYS[2], ARGV[3])
  if not enc then return 0 end
  if ARGV[4] == 'waiting' and redis.call('ZSCORE', KEYS[10], ARGV[3]) then return 0 end
  local t = decode(ARGV[3], enc)
  unlink(t)
  redis.call('HDEL', KEYS[2], t.id)
  redis.call('ZREM', KEYS[10], t.id)
  refresh(t.class, t.tenant, true)
  return 1

elseif op == 'started' or op == 'calling' then
  -- ARGV: op, now, id[, dims..., send lag µs]: the released task reached a handler.
  -- With dims, the job's charge moves to now, where the provider will
  -- count the call. A token bucket counts refill from each admission on,
  -- but the provider's, which has seen none of the calls admitted and not
  -- started yet (this one's included: their sum is U), stays capped at
  -- full until they arrive: ours becomes min(full, level + U) - U, what
  -- the provider holds now less what it has not seen yet (never higher
  -- than it is), so a bucket that was full when a burst was admitted, or
  -- a key left idle (several keys: often), does not admit early after it.
  -- The reservation is marked started (" s").
  -- A window moves the charge from the slot of its admission: a job
  -- that waited for a worker would otherwise stop counting here before it
  -- stops counting there. Admission looks ahead (see ready below), so
  -- the room it counted on may not be here yet: then the charge stays
  -- where it is and the call waits for the room (a start does not: the
  -- handler prepares its call meanwhile). The first start samples the
  -- lag from admission to start (lag_us) and marks the reservation
  -- started at now (" s<µs>"). The reply is 0.
  -- calling: the job is about to send its call. A bucket is lowered as
  -- at the start, counting the charges not called yet (marked " c"),
  -- and the call's way to the provider (sendLag of refill). A
  -- window: its charge moves again, to now, so the handler's work
  -- before the call (Redis reads, the prompt) is not left to the
  -- margin; a charge its start moved needs no room (its old slot still
  -- counts), one left at its admission may: then nothing changes and
  -- the reply is the µs to wait before calling again. The first call
  -- samples the time from the start (prep_us) and drops the start's
  -- time from the mark.
  redis.call('ZREM', KEYS[10], ARGV[3])
  redis.call('HDEL', KEYS[2], ARGV[3])
  if ARGV[4] == nil then return 0 end
  local r = redis.call('HGET', KEYS[12], ARGV[3])
  local at = tonumber(redis.call('ZSCORE', KEYS[13], ARGV[3]) or '')
  if not r or not at then return 0 end
  if at > now then at = now end
  local charged, key, wasStarted = reservation(r)
  if key == nil then return 0 end
  local st, last = B.load(keystate(key), ARGV, 3, now)
  -- after the dims: the µs from a call to its arrival at the provider
  -- (Config.SendLag); a provider's bucket full meanwhile wastes that
  -- refill, and ours, already charged, counts it
  local sendLag = tonumber(ARGV[last + 1] or '') or 0
  local costs = {}
  for j = 1, st.n do costs[j] = charged[j] or 0 end
  if op == 'calling' and st.n == 0 then return 0 end
  if st.n > 0 and st.kind[1] == 'b' then
    -- what the provider has not seen yet: this key's charges admitted
    -- and not started (this one's included); at the call, those not
    -- called yet (" c"): the handler's work between its start and its
    -- call (tens of ms, more on a loaded machine) is refill ours counts
    -- and the provider's, capped at full, does not
    local unseen = {}
    for j = 1, st.n do unseen[j] = 0 end
    for _, v in ipairs(redis.call('HVALS', KEYS[12])) do
      local c, k, started = reservation(v)
      local pending = not started
      if op == 'calling' then pending = not string.find(v, ' c', 1, true) end
      if k == key and pending then
        for j = 1, st.n do unseen[j] = unseen[j] + (c[j] or 0) end
      end
    end
    local moved = false
    for j = 1, st.n do
      local u = unseen[j] * st.per[j]
      local cap = st.burst[j] * st.per[j]
      if u > 0 then u = u + st.lim[j] * sendLag end
      if u > 0 and st.level[j] + u > cap then
        st.level[j] = cap - u
        moved = true
      end
    end
    if moved then B.save(st) end
    if op == 'calling' then
      if not string.find(r, ' c', 1, true) then redis.call('HSET', KEYS[12], ARGV[3], r .. ' c') end
      return 0
    end
    local mark = retimed(r)
    if not wasStarted then mark = mark .. ' s' end
    if mark ~= r then redis.call('HSET', KEYS[12], ARGV[3], mark) end
    redis.call('ZADD', KEYS[13], now, ARGV[3])
    return 0
  end
  -- the samples of the look-ahead: admission to the first start, and
  -- the first start to its call (a restart's long gap is not a lag:
  -- samples are capped at the window's tenth)
  local cap = math.floor(st.per[1] / 10)
  local mark = r
  if op == 'started' and not wasStarted then
    smooth('lag', math.min(now - at, cap))
    mark = r .. ' s' .. B.fmt(now)
  elseif op == 'calling' then
    local s0 = tonumber(string.match(r, ' s(%d+)') or '')
    if s0 ~= nil then
      smooth('prep', math.min(math.max(now - s0, 0), cap))
      mark = string.gsub(r, ' s%d+', ' s', 1)
    end
  end
  for j = 1, st.n do
    if st.kind[j] == 'w' and costs[j] > 0 then B.give(st, j, costs[j], at) end
  end
  local w = B.wait(st, costs, nil)
  if w > 0 then
    -- not saved: the charge stays where it was
    if mark ~= r then redis.call('HSET', KEYS[12], ARGV[3], mark) end
    if op == 'started' then return 0 end -- the call waits
    return w
  end
  for j = 1, st.n do
    if st.kind[j] == 'w' and costs[j] > 0 then B.give(st, j, -costs[j]) end
  end
  B.save(st)
  redis.call('ZADD', KEYS[13], now, ARGV[3])
  -- the time moved: what was known of it goes; marked called, and timed
  -- at the call (" t"): 'sent' moves the charge on from here
  mark = retimed(mark)
  if op == 'calling' then
    if not string.find(mark, ' c', 1, true) then mark = mark .. ' c' end
    mark = mark .. ' t'
  end
  if mark ~= r then redis.call('HSET', KEYS[12], ARGV[3], mark) end
  return 0

elseif op == 'sent' then
  -- ARGV: op, now, id, dims..., after µs: the job's request was written
  -- to the provider's connection at most after µs past its call (the
  -- handler's clock, from before it sent 'calling'). A window moves the
  -- charge from its call to then (not later than now: also a bound), so
  -- what the process took between the call's decision and the write
  -- (the reply from Redis, the request's encoding, a loaded scheduler's
  -- delay: up to 100 ms on a busy 2-core machine) is measured, not left
  -- to the margin, which covers the rest: the network to the provider.
  -- The call's slot still counts (it stops counting a window later), so
  -- the move needs no room. Only after 'calling' (" c"), whose time the
  -- bound starts from; a token bucket has nothing to move.
  local r = redis.call('HGET', KEYS[12], ARGV[3])
  local at = tonumber(redis.call('ZSCORE', KEYS[13], ARGV[3]) or '')
  if not r or not at or not string.find(r, ' c', 1, true) then return 0 end
  local charged, key = reservation(r)
  if key == nil then return 0 end
  local st, last = B.load(keystate(key), ARGV, 3, now)
  local after = tonumber(ARGV[last + 1] or '') or 0
  local to = math.min(at + after, now)
  if st.n == 0 or st.kind[1] ~= 'w' or to <= at then return 0 end
  for j = 1, st.n do
    if st.kind[j] == 'w' and (charged[j] or 0) > 0 then B.move(st, j, charged[j], at, to) end
  end
  B.save(st)
  redis.call('ZADD', KEYS[13], to, ARGV[3])
  -- marked written (" w"): the charge's time now bounds the write, which
  -- the call's way (arrived) extends to its arrival; only from a time
  -- a window's call set (" t": not a bucket's, whose call kept its start's)
  if string.find(r, ' t', 1, true) and not string.find(r, ' w', 1, true) then redis.call('HSET', KEYS[12], ARGV[3], r .. ' w') end
  return 1

elseif op == 'arrived' then
  -- ARGV: op, now, id, way µs: the call's reply came; the way from its
  -- write to the provider is at most way (the reply's first byte less
  -- the write and the provider's processing), so the provider counted it
  -- by the charge's time (its write, after 'sent') plus way. Kept in the
  -- reservation (" a<µs>") for settle, which knows what stays charged.
  local r = redis.call('HGET', KEYS[12], ARGV[3])
  local way = tonumber(ARGV[4] or '')
  if not r or way == nil or way < 0 or not string.find(r, ' w', 1, true) or string.find(r, ' a%d') then return 0 end
  redis.call('HSET', KEYS[12], ARGV[3], r .. ' a' .. B.fmt(math.floor(way)))
  return 1

elseif op == 'settle' then
  -- ARGV: op, now, id, policy, dims... (values: actual usage); policy
  -- refund (usage replaces the estimate), debt (usage beyond the
  -- estimate is added) or estimate (the estimate stays)
  local r = redis.call('HGET', KEYS[12], ARGV[3])
  if not r then return 0 end
  local charged, key = reservation(r)
  if key ~= nil then -- else its key is gone: nothing to correct
    local st = B.load(keystate(key), ARGV, 4, now)
    -- where the charge is (its admission, or its start): a window gives
    -- back in that slot, if it still counts
    local at = tonumber(redis.call('ZSCORE', KEYS[13], ARGV[3]) or '')
    -- a written call whose reply bounded its way (arrived): what stays
    -- charged at its write stops counting by its arrival (B.exact)
    local way = tonumber(string.match(r, ' a(%d+)') or '')
    for i = 1, math.min(#charged, st.n) do
      -- an unknown actual (-1: usage not split into input and output)
      -- leaves the charge
      local delta = charged[i] - st.val[i]
      -- what stays charged at its write: the estimate, or less what a
      -- refund gave back there (usage beyond it is charged now, elsewhere)
      local kept = charged[i]
      if st.val[i] >= 0 and (ARGV[4] == 'refund' or (delta < 0 and ARGV[4] == 'debt')) then
        B.give(st, i, delta, at)
        if ARGV[4] == 'refund' then kept = math.min(charged[i], st.val[i]) end
      end
      if way ~= nil and at ~= nil then B.exact(st, i, at, kept, at + way) end
    end
    B.save(st)
  end
  redis.call('HDEL', KEYS[12], ARGV[3])
  redis.call('ZREM', KEYS[13], ARGV[3])
  return 1

elseif op == 'delay' then
  -- ARGV: op, now, id, encoded ticket, due µs: register when due
  redis.call('ZADD', KEYS[14], tonumber(ARGV[5]), ARGV[3] .. '\0' .. ARGV[4])
  return 1

elseif op == 'admit' then
  local paused = redis.call('GET', KEYS[15])
  if paused then return {B.fmt(now), '0', {}, paused} end
  -- the keys not paused
  local live = {}
  for k = 0, NKEYS - 1 do
    local kp = keypaused(k)
    local why = nil
    if kp ~= nil then why = redis.call('GET', kp) end
    if why then paused = why else live[#live + 1] = k end
  end
  if #live == 0 then return {B.fmt(now), '0', {}, 'every key is paused: ' .. paused} end
  local due = redis.call('ZRANGEBYSCORE', KEYS[14], '-inf', now, 'LIMIT', 0, 1000)
  for _, m in ipairs(due) do
    local id, enc = string.match(m, '^([^%z]*)%z(.*)$')
    redis.call('ZREM', KEYS[14], m)
    if id and redis.call('HEXISTS', KEYS[2], id) == 0 then register(id, enc) end
  end
  -- ARGV: op, now, budget, mode, chat_share, aging_us, release_us,
  --       w_paid, w_trial, w_free, chat_cap, dims (values mark the
  --       kinds: 0 requests, 1 tokens, 2 input, 3 output tokens)
  -- budget: "n" jobs of any class, or "n:b": n jobs, at most b of them
  -- batch (the rest of the process's free slots only chat may use)
  local budget, bmax = string.match(ARGV[3], '^(%d+):(%d+)$')
  if budget then budget, bmax = tonumber(budget), tonumber(bmax) else budget = tonumber(ARGV[3]); bmax = budget end
  local nbatch = 0
  local mode = ARGV[4]
  -- chat_share ends in 'c' for a model chat always uses (the chat model)
  local sharearg, always = string.match(ARGV[5], '^([^c]*)(c?)$')
  local share, aging, release = tonumber(sharearg), tonumber(ARGV[6]), tonumber(ARGV[7])
  local weight = {paid = tonumber(ARGV[8]), trial = tonumber(ARGV[9]), free = tonumber(ARGV[10])}
  local cap = tonumber(ARGV[11])
  local cweight = {chat = cap, batch = 1 - cap}
  local sts = {}
  for _, k in ipairs(live) do sts[k] = B.load(keystate(k), ARGV, 11, now) end
  -- st is the first live key's: every key has the model's limits
  local st = sts[live[1]]
  local backfills = st.n > 0
  for i = 1, st.n do
    if st.kind[i] ~= 'w' then backfills = false end
  end
  -- a bucket keeps chat's share as a floor, at no cost; room a window
  -- keeps is lost, so a window keeps it only while chat uses the model:
  -- the chat model always, another model while a chat ticket was
  -- registered for it within the last hour (or 60 windows)
  if backfills and always == '' then
    local seen = tonumber(redis.call('HGET', KEYS[11], 'chat_at') or '')
    if seen == nil or now - seen > math.max(3600000000, 60 * st.per[1]) then share = 0 end
  end
  local keep = {}
  for i = 1, st.n do keep[i] = math.floor(share * st.burst[i]) end
  -- the reserve in tokens: how far chat may run ahead of its capped share
  -- on the room batch must leave it
  local reservetok = 0
  for i = 1, st.n do
    if st.val[i] == 1 then reservetok = math.max(reservetok, keep[i]) end
  end
  -- a window looks ahead by the time from admission to the call (the lag
  -- to the start and the handler's preparation, each measured, with
  -- twice their deviation; at most a tenth of the window): room that
  -- frees by the time the job is ready to call is as good as room now,
  -- and the call waits for it if it comes early (calling)
  local ahead = 0
  if backfills then
    local v = redis.call('HMGET', KEYS[11], 'lag_us', 'lag_dev', 'prep_us', 'prep_dev')
    for i = 1, 4 do
      local x = tonumber(v[i] or '') or 0
      if i % 2 == 0 then x = 2 * x end
      ahead = ahead + x
    end
    ahead = math.min(ahead, math.floor(st.per[1] / 10))
  end
  local out = {}
  local wait = 0
  local dirty = {}
  local V = vt('V')
  -- roomof is the share of its limit a key's bucket has left in its
  -- fullest dimension.
  local function roomof(s)
    local room = nil
    for i, v in ipairs(B.available(s)) do
      local r = v / s.lim[i]
      if room == nil or r < room then room = r end
    end
    return room or 0
  end
  -- pick returns the live key whose bucket admits costs now (with keep;
  -- a window also with the look-ahead), the one with the most room; else
  -- nil, the shortest wait and the key it is for; or nil, a negative
  -- error code and the dimension when costs can never fit (B.wait: every
  -- key has the same limits).
  local function pick(costs, kp, lookahead)
    local best, bestroom, soon, soonw = nil, nil, nil, nil
    for _, k in ipairs(live) do
      local w, dim = B.wait(sts[k], costs, kp)
      if w < 0 then return nil, w, dim end
      if w > 0 and w <= lookahead then w = 0 end
      if w == 0 then
        local room = roomof(sts[k])
        if best == nil or room > bestroom then best, bestroom = k, room end
      elseif soonw == nil or w < soonw then
        soon, soonw = k, w
      end
    end
    if best ~= nil then return best, 0 end
    return nil, soonw, soon
  end
  -- grant admits cand (already charged with costs on key): its order's
  -- tags, its reservation and the reply.
  local function grant(cand, via, costs, key)
    if cand.class ~= 'chat' then
      nbatch = nbatch + 1
      if cap < 1 then redis.call('HDEL', KEYS[8], 'c:r') end
    end
    -- FIFO comparison: was someone older waiting?
    local fifo = redis.call('ZRANGE', KEYS[9], 0, 0)
    if #fifo > 0 and fifo[1] ~= cand.id then
      local fenc = redis.call('HGET', KEYS[2], fifo[1])
      redis.call('HINCRBY', KEYS[11], 'ahead_tok:' .. cand.class, cand.tokens)
      if fenc then redis.call('HINCRBY', KEYS[11], 'behind_tok:' .. decode(fifo[1], fenc).class, cand.tokens) end
    end
    unlink(cand)
    local cls = cand.class
    if cls ~= 'chat' then
      local s = vt('t:' .. cls)
      redis.call('HSET', KEYS[8], 't:' .. cls, s + cand.tokens / weight[cls])
      if s > V then V = s end
    end
    if via ~= 'aged' then
      local ff = tonumber(redis.call('ZSCORE', HEADS[cls], cand.tenant) or '')
      if ff and via == 'same_pr' then
        -- the flow's tag is its head's finish: it served cand instead
        local h = flowhead(cls, cand.tenant)
        if h then ff = ff - h.tokens / h.prio + cand.tokens / cand.prio end
      end
      if ff then
        redis.call('HSET', KEYS[8], 'f:' .. cls .. ':' .. cand.tenant, ff)
        local fs = ff - cand.tokens / cand.prio
        if fs > vt('V:' .. cls) then redis.call('HSET', KEYS[8], 'V:' .. cls, fs) end
      end
    end
    refresh(cls, cand.tenant, true)
    if cap < 1 then
      -- the two classes' tags: an idle class starts at the last start
      local k = 'batch'
      if cls == 'chat' then k = 'chat' end
      local s = math.max(vt('c:' .. k), vt('c:V'))
      redis.call('HSET', KEYS[8], 'c:' .. k, s + math.max(cand.tokens, 1) / cweight[k], 'c:V', s)
    end
    redis.call('ZADD', KEYS[10], now + release, cand.id)
    local rc = {}
    for i = 1, st.n do rc[i] = B.fmt(costs[i]) end
    if NKEYS > 1 then rc[#rc + 1] = 'k' .. key end
    redis.call('HSET', KEYS[12], cand.id, table.concat(rc, ' '))
    redis.call('ZADD', KEYS[13], now, cand.id)
    redis.call('HINCRBY', KEYS[11], 'adm_tok:' .. cand.class, cand.tokens)
    redis.call('HINCRBY', KEYS[11], 'adm_n:' .. cand.class, 1)
    redis.call('LPUSH', KEYS[16], cand.class .. ':' .. B.fmt(now - cand.enq))
    out[#out + 1] = cand.id
    out[#out + 1] = via .. '|' .. cand.queue .. '|' .. cand.class .. '|' .. cand.tenant .. '|' .. cand.tokens .. '|' .. B.fmt(cand.enq) .. '|' .. key
  end
  -- costsof is a ticket's charge per dimension by its kind (the value
  -- marks it): a request counts 1, total tokens the estimate, input and
  -- output tokens their parts of it.
  local function costsof(t)
    local c = {}
    for i = 1, st.n do
      local v = st.val[i]
      if v == 0 then c[i] = 1 elseif v == 2 then c[i] = t.input elseif v == 3 then c[i] = t.output else c[i] = t.tokens end
    end
    return c
  end
  -- samepr: a window frees room in steps, as old slots leave it, and the
  -- room a waiting ticket gathers meanwhile idles; another file of the
  -- same pull request (same tier, tenant and run: the order of a run's
  -- files matters to nobody) that fits now takes the head's place. It
  -- returns the first of the run's next tickets that fits now, its costs
  -- and key; else nil and the soonest of their waits. Runs without a
  -- sequence (the gateway's requests) keep their order.
  local function samepr(head)
    local pr = string.sub(head.rank, 1, #head.rank - 6)
    if #head.rank < 7 or (tonumber(pr) or 0) == 0 then return nil end
    local prefix = head.class .. '|' .. head.tenant .. '|' .. pr
    local soon = nil
    local kp = head.class ~= 'chat' and keep or nil
    for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, 8)) do
      local id = string.match(m, '([^|]*)$')
      local enc = nil
      if id ~= head.id then enc = redis.call('HGET', KEYS[2], id) end
      if enc then
        local t = decode(id, enc)
        local c = costsof(t)
        local k, tw = pick(c, kp, ahead)
        if k ~= nil then return t, c, k, nil end
        if tw > 0 and (soon == nil or tw < soon) then soon = tw end
      end
    end
    return nil, nil, nil, soon
  end
  -- backfill: a window frees room in steps (as its oldest slots stop
  -- counting), so when the next ticket in order does not fit, room the
  -- window has now may sit idle until then. Tickets further back (the
  -- first of each flow, chat's then each tier's, a few flows each) take
  -- it if they fit now and still leave the waiting ticket room when its
  -- turn comes (B.slack): it is admitted no later than without them.
  -- Where chat does not go, two more: room that only putting the waiting
  -- ticket off frees is taken too, within a bound (a tenth of the window
  -- over the wait it had when it first waited in front: its due, kept in
  -- the virtual times hash, so no ticket is put off more than that in
  -- all); and the first four tickets of each flow are looked at, not
  -- only its first (a flow's small tickets often wait behind a big one).
  -- Otherwise the room of a window that has just filled idles for a
  -- whole window while a big ticket gathers its last part. Where chat
  -- goes, the room packing leaves is what lets a chat in at once. With
  -- several keys the waiting ticket waits for key hk (the soonest);
  -- another key's room now is taken by whatever fits it.
  local function backfill(head, headcosts, w, hk)
    local hkeep = head.class ~= 'chat' and keep or nil
    local slack = B.slack(sts[hk], headcosts, hkeep, w)
    if slack == nil then return end
    -- allow: how long the head may wait, its due less now; not where
    -- chat goes (the room packing leaves there lets a chat in at once)
    local allow = 0
    if share == 0 then
      local due = nil
      local stored = redis.call('HGET', KEYS[8], 'bf')
      if stored then
        local id, at = string.match(stored, '^(.*)|(%d+)$')
        if id == head.id then due = tonumber(at) end
      end
      if due == nil then
        due = now + w + math.floor(st.per[1] / 10)
        redis.call('HSET', KEYS[8], 'bf', head.id .. '|' .. B.fmt(due))
      end
      allow = due - now
    end
    -- try admits t if it fits now and leaves the head its due
    local function try(t, cls)
      local c = costsof(t)
      local kp = cls ~= 'chat' and keep or nil
      local ok = true
      for i = 1, st.n do
        if c[i] > slack[i] then ok = false end
      end
      local key, taken = nil, false
      local now0 = B.wait(sts[hk], c, kp) == 0
      if ok and now0 then
        key = hk
      elseif now0 and allow > w then
        -- put the head off, within its due
        B.take(sts[hk], c)
        local nw = B.wait(sts[hk], headcosts, hkeep)
        if nw >= 0 and nw <= allow then
          key, taken = hk, true
        else
          local back = {}
          for i = 1, st.n do back[i] = -c[i] end
          B.take(sts[hk], back)
        end
      end
      if key == hk then
        for i = 1, st.n do slack[i] = slack[i] - c[i] end
      else
        for _, k in ipairs(live) do
          if key == nil and k ~= hk and B.wait(sts[k], c, kp) == 0 then key = k end
        end
      end
      if key ~= nil then
        if not taken then B.take(sts[key], c) end
        dirty[key] = true
        grant(t, 'backfill', c, key)
      end
    end
    -- a flow's first tickets: its head, and where chat does not go, the
    -- next few of the flow (a small one behind a big one)
    local depth = 1
    if share == 0 then depth = 4 end
    for _, cls in ipairs({'chat', 'paid', 'trial', 'free'}) do
      for _, tenant in ipairs(redis.call('ZRANGE', HEADS[cls], 0, 7)) do
        local prefix = cls .. '|' .. tenant .. '|'
        for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, depth)) do
          if #out >= budget * 2 then return end
          local id = string.match(m, '([^|]*)$')
          local enc = nil
          if id ~= head.id then enc = redis.call('HGET', KEYS[2], id) end
          if enc and (cls == 'chat' or nbatch < bmax) then try(decode(id, enc), cls) end
        end
      end
    end
  end
  while #out < budget * 2 do
    local cand, via = nil, nil
    -- batch's candidate: the oldest batch ticket past the aging bound,
    -- else the weighted order of the tiers
    local a = redis.call('ZRANGE', KEYS[18], 0, 0, 'WITHSCORES')
    if #a > 0 and now - tonumber(a[2]) > aging then
      local enc = redis.call('HGET', KEYS[2], a[1])
      if enc then cand, via = decode(a[1], enc), 'aged' else redis.call('ZREM', KEYS[18], a[1]) end
    end
    if cand == nil then
      local best, bestF = nil, nil
      for _, tier in ipairs(TIERS) do
        local h = redis.call('ZRANGE', HEADS[tier], 0, 0)
        if #h > 0 then
          local t = flowhead(tier, h[1])
          if t == nil then
            redis.call('ZREM', HEADS[tier], h[1])
          else
            local f = vt('t:' .. tier) + t.tokens / weight[tier]
            if mode == 'strict' then
              best = t
              break
            end
            if bestF == nil or f < bestF then best, bestF = t, f end
          end
        end
      end
      cand, via = best, 'fair'
    end
    if nbatch >= bmax then cand, via = nil, nil end
    -- chat's candidate: the tenant flow with the smallest finish tag
    local chat = nil
    local h = redis.call('ZRANGE', HEADS.chat, 0, 0)
    if #h > 0 then
      chat = flowhead('chat', h[1])
      if chat == nil then redis.call('ZREM', HEADS.chat, h[1]) end
    else
      -- a chat ticket registered before chat had flows (upgrade)
      local c = redis.call('ZRANGE', KEYS[4], 0, 0)
      if #c > 0 then
        local enc = redis.call('HGET', KEYS[2], c[1])
        if enc then chat = decode(c[1], enc) else redis.call('ZREM', KEYS[4], c[1]) end
      end
    end
    -- chat against batch. Uncapped (cap 1), chat goes unless a batch
    -- ticket is past the aging bound; capped, the class with the smaller
    -- start tag goes, chat on a tie unless batch's ticket is aged.
    if chat ~= nil then
      local aged = via == 'aged'
      if cand == nil then
        cand, via = chat, 'chat'
      elseif cap >= 1 then
        if not aged then cand, via = chat, 'chat' end
      else
        local cv = vt('c:V')
        local sc, sb = math.max(vt('c:chat'), cv), math.max(vt('c:batch'), cv)
        if sc < sb or (sc == sb and not aged) then cand, via = chat, 'chat' end
      end
    end
    if cand == nil then break end
    local costs = costsof(cand)
    -- key: the key charged; else w, the wait (dim: the key it is for)
    -- or an error code (dim: the dimension it exceeds)
    local key, w, dim = pick(costs, cand.class ~= 'chat' and keep or nil, ahead)
    if w < 0 then
      -- can never fit: drop the ticket and report it, never wait forever
      unlink(cand)
      redis.call('HDEL', KEYS[2], cand.id)
      refresh(cand.class, cand.tenant, true)
      out[#out + 1] = cand.id
      out[#out + 1] = 'reject|' .. cand.queue .. '|' .. cand.class .. '|' .. cand.tenant .. '|' .. cand.tokens .. '|' .. B.fmt(cand.enq) .. '|' .. dim
    elseif w > 0 then
      -- the reserve is chat's: a batch ticket held by it (batch must leave
      -- keep) does not hold a chat that fits now, as long as the chat
      -- taken this way since batch was last admitted stays within the
      -- reserve (c:r); past that, chat waits its turn
      local rkey, rcosts = nil, nil
      if chat ~= nil and cand.class ~= 'chat' and cap < 1 then
        if vt('c:r') + chat.tokens <= reservetok then
          rcosts = costsof(chat)
          local k, rw = pick(rcosts, nil, ahead)
          if rw == 0 then rkey = k end
        end
      end
      -- else a window's room may go to another file of the head's run;
      -- not where chat goes: there the room packing leaves is what lets
      -- a chat in at once (filled, chat waits up to the horizon)
      local alt, altc, altk, altw = nil, nil, nil, nil
      if rkey == nil and backfills and share == 0 and via == 'fair' then alt, altc, altk, altw = samepr(cand) end
      if alt ~= nil then
        B.take(sts[altk], altc)
        dirty[altk] = true
        grant(alt, 'same_pr', altc, altk)
      elseif rkey == nil then
        -- the loop comes back when the head, or a file of its run, fits:
        -- a window's look-ahead admits that much before the room is there
        wait = math.min(w, altw or w)
        if ahead > 0 then wait = math.max(wait - ahead, 1) end
        if backfills then backfill(cand, costs, w, dim) end
        break
      else
        B.take(sts[rkey], rcosts)
        dirty[rkey] = true
        redis.call('HINCRBY', KEYS[8], 'c:r', chat.tokens)
        -- chat's tag moves on (it pays for this in later turns); the
        -- classes' virtual time stays where waiting batch holds it
        local cv = vt('c:V')
        grant(chat, 'reserve', rcosts, rkey)
        redis.call('HSET', KEYS[8], 'c:V', cv)
      end
    else
      if #out >= budget * 2 then break end
      B.take(sts[key], costs)
      dirty[key] = true
      grant(cand, via, costs, key)
    end
  end
  redis.call('HSET', KEYS[8], 'V', V)
  if next(dirty) ~= nil then
    for k in pairs(dirty) do B.save(sts[k]) end
    redis.call('LTRIM', KEYS[16], 0, 1999)
  end
  return {B.fmt(now), B.fmt(wait), out}

elseif op == 'position' then
  -- ARGV: op, now, mode, w_paid, w_trial, w_free, ids...: where the
  -- first (in its flow's order) of ids waiting here stands.
  -- -> {now, found, ahead, class, rate (admissions/s, "" unknown)}
  -- An estimate of admission's order, not a replay of it: the ticket's
  -- own flow ahead of it; each other tenant of its class up to as many
  -- turns (fair queuing); chat; and the other tiers, all of a higher
  -- one when strict, by weight when weighted.
  local mode = ARGV[3]
  local weight = {paid = tonumber(ARGV[4]), trial = tonumber(ARGV[5]), free = tonumber(ARGV[6])}
  local found, first, firstm = 0, nil, nil
  for i = 7, #ARGV do
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

elseif op == 'stats' then
  local out = {B.fmt(now)}
  out[#out + 1] = redis.call('ZCARD', KEYS[4])
  for _, tier in ipairs(TIERS) do
    out[#out + 1] = redis.call('ZLEXCOUNT', KEYS[3], '[' .. tier .. '|', '[' .. tier .. '|\255')
  end
  out[#out + 1] = redis.call('ZCARD', KEYS[10])
  out[#out + 1] = redis.call('HGETALL', KEYS[11])
  -- backlog per tenant of each tier (active flows only, at most 50 each)
  local tenants = {}
  for _, tier in ipairs({'chat', 'paid', 'trial', 'free'}) do
    for _, tenant in ipairs(redis.call('ZRANGE', HEADS[tier], 0, 49)) do
      local prefix = tier .. '|' .. tenant .. '|'
      tenants[#tenants + 1] = tier .. '|' .. tenant
      tenants[#tenants + 1] = redis.call('ZLEXCOUNT', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255')
    end
  end
  out[#out + 1] = tenants
  return out
end
return redis.error_reply('admission: unknown op ' .. tostring(op))
