-- admission admit, its helpers (read after order.lua, before
-- admit_backfill.lua and admit.lua). Each takes A, the admission under
-- way (admit.lua builds it):
--   A.live    the model's key indexes not paused      A.sts  their bucket states (by index)
--   A.st      the first live key's state (every key has the model's limits)
--   A.keep    per dimension, the room batch leaves chat   A.ahead  the look-ahead µs
--   A.share   chat's share (0: none kept)   A.cap  chat's cap   A.cweight  the classes' weights
--   A.weight  the tiers' weights   A.release  µs an admitted ticket may take to start
--   A.budget  jobs to admit at most   A.bmax  of them batch at most   A.nbatch  batch admitted
--   A.out     the reply's {id, "via|queue|class|tenant|tokens|enq_us|key"} pairs
--   A.dirty   the key indexes whose states were charged   A.V  the tiers' virtual time
--   A.writes  the admitted tickets' released and res entries and waits, written at the end
-- Uses: B, HEADS, NKEYS, decode, flowhead, flowlist, now, refresh,
--   statadd, statget, statset, ticketenc, unlink, vt, vtdel, vtset, zfirst,
--   zscore
-- Defines: roomof, pick, reserve, keepfor, grant, charge, costsof, samepr

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

-- pick returns the live key whose bucket admits costs now (with keep
-- kp; a window also with the look-ahead), the one with the most room;
-- else nil, the shortest wait and the key it is for; or nil, a negative
-- error code and the dimension when costs can never fit (B.wait: every
-- key has the same limits).
local function pick(A, costs, kp, lookahead)
  local best, bestroom, soon, soonw = nil, nil, nil, nil
  for _, k in ipairs(A.live) do
    local w, dim = B.wait(A.sts[k], costs, kp)
    if w < 0 then return nil, w, dim end
    if w > 0 and w <= lookahead then w = 0 end
    if w == 0 then
      local room = roomof(A.sts[k])
      if best == nil or room > bestroom then best, bestroom = k, room end
    elseif soonw == nil or w < soonw then
      soon, soonw = k, w
    end
  end
  if best ~= nil then return best, 0 end
  return nil, soonw, soon
end

-- reserve returns chat's reserve, the room batch leaves chat in each
-- dimension, and sets A.share to the largest share of a burst it keeps
-- (0: none). It is A.share of each burst, at least tokens in a token
-- dimension, at most half the burst, kept whole while chat uses the
-- model: a chat waits, or one was registered within idle µs (a bucket's
-- and the chat model's idle clock starts at their first attempt; a
-- window of another model keeps nothing until a chat comes, room a
-- window keeps unused is lost). Then it decays into batch, linearly over
-- as long again, so an idle reserve costs batch nothing. A window keeps
-- it over a horizon (chat finds it within), the chat model's window now
-- (keep.now: chat finds it at once, the room batch loses while chat is
-- active).
local function reserve(A, window, always, tokens, idle)
  local st = A.st
  local seen = tonumber(statget('chat_at') or '')
  if zfirst(HEADS.chat) ~= nil or zfirst(KEYS[4]) ~= nil or (seen == nil and (always or not window)) then
    seen = now
    statset('chat_at', B.fmt(now))
  end
  local f = 0
  if seen ~= nil then
    local d = now - seen
    if idle <= 0 or d <= idle then f = 1 elseif d < 2 * idle then f = (2 * idle - d) / idle end
  end
  local keep, share = {}, 0
  for i = 1, st.n do
    local k = A.share * st.burst[i]
    if st.val[i] == 1 then k = math.max(k, tokens) end
    keep[i] = math.floor(f * math.min(k, st.burst[i] / 2))
    share = math.max(share, keep[i] / st.burst[i])
  end
  A.share = share
  keep.now = window and always
  return keep
end

-- keepfor is the room a ticket of class cls must leave: batch leaves
-- chat its keep, chat takes it.
local function keepfor(A, cls)
  if cls ~= 'chat' then return A.keep end
  return nil
end

-- grant admits cand (already charged with costs on key): its order's
-- tags, its reservation and the reply.
local function grant(A, cand, via, costs, key)
  if cand.class ~= 'chat' then
    A.nbatch = A.nbatch + 1
    if A.cap < 1 then vtdel('c:r') end
  end
  -- FIFO comparison: was someone older waiting?
  local fifo = zfirst(KEYS[9])
  if fifo ~= nil and fifo ~= cand.id then
    local fenc = ticketenc(fifo)
    statadd('ahead_tok:' .. cand.class, cand.tokens)
    if fenc then statadd('behind_tok:' .. decode(fifo, fenc).class, cand.tokens) end
  end
  unlink(cand)
  local cls = cand.class
  if cls ~= 'chat' then
    local s = vt('t:' .. cls)
    vtset('t:' .. cls, s + cand.tokens / A.weight[cls])
    if s > A.V then A.V = s end
  end
  if via ~= 'aged' then
    local ff = zscore(HEADS[cls], cand.tenant)
    if ff and via == 'same_pr' then
      -- the flow's tag is its head's finish: it served cand instead
      local h = flowhead(cls, cand.tenant)
      if h then ff = ff - h.tokens / h.prio + cand.tokens / cand.prio end
    end
    if ff then
      vtset('f:' .. cls .. ':' .. cand.tenant, ff)
      local fs = ff - cand.tokens / cand.prio
      if fs > vt('V:' .. cls) then vtset('V:' .. cls, fs) end
    end
  end
  refresh(cls, cand.tenant, true)
  if A.cap < 1 then
    -- the two classes' tags: an idle class starts at the last start
    local k = 'batch'
    if cls == 'chat' then k = 'chat' end
    local s = math.max(vt('c:' .. k), vt('c:V'))
    vtset('c:' .. k, s + math.max(cand.tokens, 1) / A.cweight[k])
    vtset('c:V', s)
  end
  -- written once per call (admit.lua): nothing here reads them
  local W = A.writes
  W.released[#W.released + 1] = now + A.release
  W.released[#W.released + 1] = cand.id
  local rc = {}
  for i = 1, A.st.n do rc[i] = B.fmt(costs[i]) end
  if A.st.n > 0 then rc[#rc + 1] = B.dimsmark(A.st) end
  if NKEYS > 1 then rc[#rc + 1] = 'k' .. key end
  rc[#rc + 1] = '@' .. B.fmt(now)
  W.res[#W.res + 1] = cand.id
  W.res[#W.res + 1] = table.concat(rc, ' ')
  statadd('adm_tok:' .. cand.class, cand.tokens)
  statadd('adm_n:' .. cand.class, 1)
  W.waits[#W.waits + 1] = cand.class .. ':' .. B.fmt(now - cand.enq)
  A.out[#A.out + 1] = cand.id
  A.out[#A.out + 1] = via .. '|' .. cand.queue .. '|' .. cand.class .. '|' .. cand.tenant .. '|' .. cand.tokens .. '|' .. B.fmt(cand.enq) .. '|' .. key
end

-- charge takes costs from key's bucket and admits t.
local function charge(A, t, via, costs, key)
  B.take(A.sts[key], costs)
  A.dirty[key] = true
  grant(A, t, via, costs, key)
end

-- costsof is a ticket's charge per dimension by its kind (the value
-- marks it): a request counts 1, total tokens the estimate, input and
-- output tokens their parts of it.
local function costsof(A, t)
  local c = {}
  for i = 1, A.st.n do
    local v = A.st.val[i]
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
local function samepr(A, head)
  local pr = string.sub(head.rank, 1, #head.rank - 6)
  if #head.rank < 7 or (tonumber(pr) or 0) == 0 then return nil end
  local prefix = head.class .. '|' .. head.tenant .. '|' .. pr
  local soon = nil
  local kp = keepfor(A, head.class)
  local l = flowlist(prefix, 8)
  for x = 1, math.min(8, #l) do
    local m = l[x]
    local id = string.match(m, '([^|]*)$')
    local enc = nil
    if id ~= head.id then enc = ticketenc(id) end
    if enc then
      local t = decode(id, enc)
      local c = costsof(A, t)
      local k, tw = pick(A, c, kp, A.ahead)
      if k ~= nil then return t, c, k, nil end
      if tw > 0 and (soon == nil or tw < soon) then soon = tw end
    end
  end
  return nil, nil, nil, soon
end
