-- admission admit: admits, in the model's order, as many waiting tickets
-- as its keys' buckets admit now (at most a budget), charging them in
-- the same step. Read after order.lua, admit_pick.lua, admit_backfill.lua.
-- KEYS: prelude.lua's.
-- ARGV[1] now µs, ARGV[2] budget: "n" jobs of any class, or "n:b": n
-- jobs, at most b of them batch (the rest of the process's free slots
-- only chat may use), ARGV[3] mode (strict|weighted), ARGV[4] chat's
-- reserve "share:tokens:idle µs" (the share of each burst, at least
-- tokens of a token dimension, kept while chat used the model within
-- idle; ending in 'c' for a model chat always uses: the chat model),
-- ARGV[5] the aging bound µs, ARGV[6] release µs (how long an admitted
-- ticket may take to start), ARGV[7..9] the weights of paid, trial and
-- free, ARGV[10] chat's cap, ARGV[11..] the model's dimensions (B.load;
-- the values mark the kinds: 0 requests, 1 tokens, 2 input, 3 output).
-- Reply: {now, wait µs (when the head waits: when to come back), {id,
-- "via|queue|class|tenant|tokens|enq_us|key", ...}} ("reject|...|dim"
-- for a ticket that can never fit); paused: {now, '0', {}, why}.
-- Uses: B, DEFER, HEADS, NKEYS, TIERS, backfill, callchunks, charge,
--   costsof, decode, flowhead, flushorder, keepfor, keypaused, keystate,
--   now, pick, refresh, register, reserve, samepr, statget, statload,
--   ticketdel, ticketenc, ucopened, unlink, vt, vtincr, vtload, vtset,
--   zfirst, zrem

-- the model's pause and its keys', in one read
local pkeys, at = {KEYS[15]}, {}
for k = 0, NKEYS - 1 do
  if keypaused(k) ~= nil then
    pkeys[#pkeys + 1] = keypaused(k)
    at[k] = #pkeys
  end
end
local whys = redis.call('MGET', unpack(pkeys))
local paused = whys[1]
if paused then return {B.fmt(now), '0', {}, paused} end
-- the keys not paused
local live = {}
for k = 0, NKEYS - 1 do
  local why = at[k] and whys[at[k]]
  if why then paused = why else live[#live + 1] = k end
end
if #live == 0 then return {B.fmt(now), '0', {}, 'every key is paused: ' .. paused} end
-- from here writes to the virtual times and stats hashes wait for the
-- end (flushorder), the order's reads of the same values are memos
DEFER.on = true
-- the stats admit reads and the counters it adds to, in one command
do
  local f = {'chat_at', 'lag_us', 'lag_dev', 'prep_us', 'prep_dev'}
  for _, c in ipairs({'chat', 'paid', 'trial', 'free'}) do
    for _, n in ipairs({'ahead_tok:', 'behind_tok:', 'adm_tok:', 'adm_n:'}) do f[#f + 1] = n .. c end
  end
  statload(f)
end
vtload({'V', 't:paid', 't:trial', 't:free', 'V:paid', 'V:trial', 'V:free', 'V:chat', 'c:V', 'c:chat', 'c:batch', 'c:r'})
local due = redis.call('ZRANGEBYSCORE', KEYS[14], '-inf', now, 'LIMIT', 0, 1000)
for _, m in ipairs(due) do
  local id, enc = string.match(m, '^([^%z]*)%z(.*)$')
  redis.call('ZREM', KEYS[14], m)
  if id and ticketenc(id) == nil then register(id, enc) end
end

local A = {live = live, sts = {}, out = {}, dirty = {}, nbatch = 0, V = vt('V'),
  writes = {released = {}, res = {}, waits = {}}}
local budget, bmax = string.match(ARGV[2], '^(%d+):(%d+)$')
if budget then budget, bmax = tonumber(budget), tonumber(bmax) else budget = tonumber(ARGV[2]); bmax = budget end
A.budget, A.bmax = budget, bmax
local mode = ARGV[3]
local sharearg, resvarg, idlearg, always = string.match(ARGV[4], '^([^:c]*):?([^:c]*):?([^:c]*)(c?)$')
local aging = tonumber(ARGV[5])
A.share, A.release = tonumber(sharearg), tonumber(ARGV[6])
A.weight = {paid = tonumber(ARGV[7]), trial = tonumber(ARGV[8]), free = tonumber(ARGV[9])}
A.cap = tonumber(ARGV[10])
A.cweight = {chat = A.cap, batch = 1 - A.cap}
for _, k in ipairs(live) do A.sts[k] = B.load(keystate(k), ARGV, 10, now) end
local st = A.sts[live[1]]
A.st = st
local backfills = st.n > 0
for i = 1, st.n do
  if st.kind[i] ~= 'w' then backfills = false end
end
A.keep = reserve(A, backfills, always == 'c', tonumber(resvarg) or 0, tonumber(idlearg) or 0)
-- the reserve in tokens: how far chat may run ahead of its capped share
-- on the room batch must leave it
local reservetok = 0
for i = 1, st.n do
  if st.val[i] == 1 then reservetok = math.max(reservetok, A.keep[i]) end
end
-- a window looks ahead by the time from admission to the call (the lag
-- to the start and the handler's preparation, each measured, with
-- twice their deviation; at most a tenth of the window): room that
-- frees by the time the job is ready to call is as good as room now,
-- and the call waits for it if it comes early (calling); not where the
-- chat model's window keeps chat's reserve now: a job admitted ahead is
-- charged before its room is there, and that room is the reserve's
A.ahead = 0
if backfills and not (A.keep.now and A.share > 0) then
  for i, f in ipairs({'lag_us', 'lag_dev', 'prep_us', 'prep_dev'}) do
    local x = tonumber(statget(f) or '') or 0
    if i % 2 == 0 then x = 2 * x end
    A.ahead = A.ahead + x
  end
  A.ahead = math.min(A.ahead, math.floor(st.per[1] / 10))
end

-- batchnext is batch's candidate and how it was chosen: the oldest
-- batch ticket past the aging bound ('aged'), else the weighted (or
-- strict) order of the tiers ('fair').
local function batchnext()
  local oldest, enqd = zfirst(KEYS[18])
  if oldest ~= nil and now - enqd > aging then
    local enc = ticketenc(oldest)
    if enc then return decode(oldest, enc), 'aged' end
    zrem(KEYS[18], oldest)
  end
  local best, bestF = nil, nil
  for _, tier in ipairs(TIERS) do
    local h = zfirst(HEADS[tier])
    if h ~= nil then
      local t = flowhead(tier, h)
      if t == nil then
        zrem(HEADS[tier], h)
      else
        local f = vt('t:' .. tier) + t.tokens / A.weight[tier]
        if mode == 'strict' then return t, 'fair' end
        if bestF == nil or f < bestF then best, bestF = t, f end
      end
    end
  end
  return best, 'fair'
end

-- chatnext is chat's candidate: the tenant flow with the smallest
-- finish tag.
local function chatnext()
  local h = zfirst(HEADS.chat)
  if h ~= nil then
    local chat = flowhead('chat', h)
    if chat == nil then zrem(HEADS.chat, h) end
    return chat
  end
  -- a chat ticket registered before chat had flows (upgrade)
  local c = zfirst(KEYS[4])
  if c ~= nil then
    local enc = ticketenc(c)
    if enc then return decode(c, enc) end
    zrem(KEYS[4], c)
  end
  return nil
end

local out = A.out
local wait = 0
while #out < budget * 2 do
  local cand, via = batchnext()
  if A.nbatch >= bmax then cand, via = nil, nil end
  local chat = chatnext()
  -- chat against batch. Uncapped (cap 1), chat goes unless a batch
  -- ticket is past the aging bound; capped, the class with the smaller
  -- start tag goes, chat on a tie unless batch's ticket is aged.
  if chat ~= nil then
    local aged = via == 'aged'
    if cand == nil then
      cand, via = chat, 'chat'
    elseif A.cap >= 1 then
      if not aged then cand, via = chat, 'chat' end
    else
      local cv = vt('c:V')
      local sc, sb = math.max(vt('c:chat'), cv), math.max(vt('c:batch'), cv)
      if sc < sb or (sc == sb and not aged) then cand, via = chat, 'chat' end
    end
  end
  if cand == nil then break end
  local costs = costsof(A, cand)
  -- key: the key charged; else w, the wait (dim: the key it is for)
  -- or an error code (dim: the dimension it exceeds)
  local key, w, dim = pick(A, costs, keepfor(A, cand.class), A.ahead)
  if w < 0 then
    -- can never fit: drop the ticket and report it, never wait forever
    unlink(cand)
    ticketdel(cand.id)
    refresh(cand.class, cand.tenant, true)
    out[#out + 1] = cand.id
    out[#out + 1] = 'reject|' .. cand.queue .. '|' .. cand.class .. '|' .. cand.tenant .. '|' .. cand.tokens .. '|' .. B.fmt(cand.enq) .. '|' .. dim
  elseif w > 0 then
    -- the reserve is chat's: a batch ticket held by it (batch must leave
    -- keep) does not hold a chat that fits now, as long as the chat
    -- taken this way since batch was last admitted stays within the
    -- reserve (c:r); past that, chat waits its turn
    local rkey, rcosts = nil, nil
    if chat ~= nil and cand.class ~= 'chat' and A.cap < 1 then
      if vt('c:r') + chat.tokens <= reservetok then
        rcosts = costsof(A, chat)
        local k, rw = pick(A, rcosts, nil, A.ahead)
        if rw == 0 then rkey = k end
      end
    end
    -- else a window's room may go to another file of the head's run;
    -- not where chat goes: there the room packing leaves is what lets
    -- a chat in at once (filled, chat waits up to the horizon)
    local alt, altc, altk, altw = nil, nil, nil, nil
    if rkey == nil and backfills and A.share == 0 and via == 'fair' then alt, altc, altk, altw = samepr(A, cand) end
    if alt ~= nil then
      charge(A, alt, 'same_pr', altc, altk)
    elseif rkey == nil then
      -- the loop comes back when the head, or a file of its run, fits:
      -- a window's look-ahead admits that much before the room is there
      wait = math.min(w, altw or w)
      if A.ahead > 0 then wait = math.max(wait - A.ahead, 1) end
      if backfills then backfill(A, cand, costs, w, dim) end
      break
    else
      vtincr('c:r', chat.tokens)
      -- chat's tag moves on (it pays for this in later turns); the
      -- classes' virtual time stays where waiting batch holds it
      local cv = vt('c:V')
      charge(A, chat, 'reserve', rcosts, rkey)
      vtset('c:V', cv)
    end
  else
    if #out >= budget * 2 then break end
    charge(A, cand, via, costs, key)
  end
end
vtset('V', A.V)
flushorder()
local W = A.writes
local nwaits = 0
if #W.released > 0 then
  callchunks('ZADD', KEYS[10], W.released)
  callchunks('HSET', KEYS[12], W.res)
  ucopened(st, W.res, A.dirty[live[1]])
  nwaits = callchunks('LPUSH', KEYS[16], W.waits) or 0
end
for k in pairs(A.dirty) do B.save(A.sts[k]) end
-- the waits list keeps the newest 2000 (only admit pushes to it)
if nwaits > 2000 then redis.call('LTRIM', KEYS[16], 0, 1999) end
return {B.fmt(now), B.fmt(wait), out}
