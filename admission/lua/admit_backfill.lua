-- admission admit, backfill (read after admit_pick.lua, before admit.lua).
--
-- A window frees room in steps (as its oldest slots stop counting), so
-- when the next ticket in order does not fit, room the window has now
-- may sit idle until then. Tickets further back (the first of each flow,
-- chat's then each tier's, a few flows each) take it if they fit now and
-- still leave the waiting ticket room when its turn comes (B.slack): it
-- is admitted no later than without them. Where chat does not go, two
-- more: room that only putting the waiting ticket off frees is taken
-- too, within a bound (a tenth of the window over the wait it had when
-- it first waited in front: its due, kept in the virtual times hash, so
-- no ticket is put off more than that in all); and the first four
-- tickets of each flow are looked at, not only its first (a flow's small
-- tickets often wait behind a big one). Otherwise the room of a window
-- that has just filled idles for a whole window while a big ticket
-- gathers its last part. Where chat goes, the room packing leaves is
-- what lets a chat in at once. With several keys the waiting ticket
-- waits for key hk (the soonest); another key's room now is taken by
-- whatever fits it.
-- Uses: B, HEADS, charge, costsof, decode, flowlist, grant, keepfor, now,
--   ticketenc, zlist
-- Defines: headdue, fill, backfill

-- headdue is how long the waiting head may be put off (its due less
-- now, the due kept in the virtual times hash field bf); 0 where chat
-- goes (the room packing leaves there lets a chat in at once).
local function headdue(A, head, w)
  if A.share ~= 0 then return 0 end
  local due = nil
  local stored = redis.call('HGET', KEYS[8], 'bf')
  if stored then
    local id, at = string.match(stored, '^(.*)|(%d+)$')
    if id == head.id then due = tonumber(at) end
  end
  if due == nil then
    due = now + w + math.floor(A.st.per[1] / 10)
    redis.call('HSET', KEYS[8], 'bf', head.id .. '|' .. B.fmt(due))
  end
  return due - now
end

-- fill admits t (of class cls) if it fits now and leaves the head
-- (F.head, F.costs, F.keep; waiting F.w µs for key F.hk, which may be
-- put off by F.allow) its due. F.slack is what the head's key may still
-- give others; fill lowers it by what it gives t there.
local function fill(A, F, t, cls)
  local c = costsof(A, t)
  local kp = keepfor(A, cls)
  local ok = true
  for i = 1, A.st.n do
    if c[i] > F.slack[i] then ok = false end
  end
  local hs = A.sts[F.hk]
  local key, taken = nil, false
  local now0 = B.wait(hs, c, kp) == 0
  if ok and now0 then
    key = F.hk
  elseif now0 and F.allow > F.w then
    -- put the head off, within its due
    B.take(hs, c)
    local nw = B.wait(hs, F.costs, F.keep)
    if nw >= 0 and nw <= F.allow then
      key, taken = F.hk, true
    else
      local back = {}
      for i = 1, A.st.n do back[i] = -c[i] end
      B.take(hs, back)
    end
  end
  if key == F.hk then
    for i = 1, A.st.n do F.slack[i] = F.slack[i] - c[i] end
  else
    for _, k in ipairs(A.live) do
      if key == nil and k ~= F.hk and B.wait(A.sts[k], c, kp) == 0 then key = k end
    end
  end
  if key == nil then return end
  if taken then
    A.dirty[key] = true
    grant(A, t, 'backfill', c, key)
  else
    charge(A, t, 'backfill', c, key)
  end
end

-- backfill gives the room the head (waiting w µs for key hk, its costs
-- headcosts) does not need before its turn to tickets further back.
local function backfill(A, head, headcosts, w, hk)
  local F = {head = head, costs = headcosts, keep = keepfor(A, head.class), w = w, hk = hk}
  F.slack = B.slack(A.sts[hk], headcosts, F.keep, w)
  if F.slack == nil then return end
  F.allow = headdue(A, head, w)
  -- a flow's first tickets: its head, and where chat does not go, the
  -- next few of the flow (a small one behind a big one)
  local depth = 1
  if A.share == 0 then depth = 4 end
  for _, cls in ipairs({'chat', 'paid', 'trial', 'free'}) do
    -- the first flows as they are now (fill changes them)
    local heads, tenants = zlist(HEADS[cls], 8), {}
    for i = 1, math.min(8, #heads) do tenants[i] = heads[i][1] end
    for _, tenant in ipairs(tenants) do
      local prefix = cls .. '|' .. tenant .. '|'
      -- the flow's first depth members as they are now (fill changes it)
      local l, first = flowlist(prefix, depth), {}
      for i = 1, math.min(depth, #l) do first[i] = l[i] end
      for _, m in ipairs(first) do
        if #A.out >= A.budget * 2 then return end
        local id = string.match(m, '([^|]*)$')
        local enc = nil
        if id ~= head.id then enc = ticketenc(id) end
        if enc and (cls == 'chat' or A.nbatch < A.bmax) then fill(A, F, decode(id, enc), cls) end
      end
    end
  end
end
