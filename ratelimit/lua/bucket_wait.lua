-- prq limiter library, part 3 of 4: how long a cost waits (B.wait),
-- the room a waiting cost leaves others (B.slack), and charging it
-- (B.take). Needs bucket_slots.lua and bucket_load.lua (before it).
-- Uses: B, addslot, eend, readslots
-- Defines: refreshlevel

-- slotwait returns the µs until need more has stopped counting in one
-- check of window dimension i (its limit's span from slot from), oldest
-- slots first, read a few at a time: usually the first free enough.
local function slotwait(st, i, need, from, span, cred)
  local h = st.newest[i]
  local w = (h + 1) * st.slot[i] + span - st.now -- everything gone
  local acc, j, late = 0, from, nil
  while j <= h and acc < need do
    local top = math.min(j + 7, h)
    local cache = readslots(st, i, j, top)
    while j <= top do
      if not cred[i][j] and cache[j] > 0 then
        acc = acc + cache[j]
        -- a slot whose calls replied may stop before an older one
        local e = eend(st, i, j)
        if late == nil or e > late then late = e end
        if acc >= need then
          w = late + 1 + span - st.now
          break
        end
      end
      j = j + 1
    end
  end
  if w < 1 then w = 1 end
  return w
end

-- windowwait returns the µs until amount c more fits in window dimension
-- i, 0 when it fits now. keep k (units of burst) is room kept for others
-- (chat): a bucket keeps it as a floor on its level, at no cost to
-- throughput, but room a window keeps unused is lost. So a window keeps
-- it over a horizon instead: c is admitted when it fits now and, once
-- what stops counting within the horizon (k's share of the span) has
-- gone, still leaves k. Whoever k is kept for finds it within the
-- horizon, and in steady state as much stops counting over the horizon
-- as k, so the window still fills. Kept now (hard: the chat model's
-- reserve, chat's room at once), k is a floor on the window's room.
local function windowwait(st, i, c, k, hard)
  local wait = 0
  local checks = {{st.lim[i], st.sum[i] - st.credit[i], st.first[i], st.per[i], st.cred}}
  if st.sub[i] > 0 then checks[2] = {st.sublim[i], st.subsum[i] - st.subcredit[i], st.subfirst[i], st.sub[i], st.scred} end
  for _, ck in ipairs(checks) do
    local limit, sum, from, span, cred = ck[1], ck[2], ck[3], ck[4], ck[5]
    local need = sum + c - limit
    if need > 0 then
      local w = slotwait(st, i, need, from, span, cred)
      if w > wait then wait = w end
    end
    if k > 0 then
      local share = k / st.burst[i]
      local kneed = need + share * limit
      if kneed > 0 then
        local w = slotwait(st, i, kneed, from, span, cred)
        if not hard then w = w - math.floor(share * span) end
        if w > wait then wait = w end
      end
    end
  end
  return wait
end

-- expiredby returns how much of one check of window dimension i (its
-- span, from slot from) stops counting within tw µs from now.
local function expiredby(st, i, from, span, tw, cred)
  local acc, j, h = 0, from, st.newest[i]
  -- slots stop counting in order (a slot's latest charge is after the
  -- previous slot's end), but for those whose calls replied, which may
  -- stop sooner: the count stops at the first slot still counting then
  while j <= h and j * st.slot[i] + span - st.now <= tw do
    local top = math.min(j + 7, h)
    local cache = readslots(st, i, j, top)
    while j <= top do
      if not cred[i][j] and cache[j] > 0 then
        if eend(st, i, j) + 1 + span - st.now > tw then return acc end
        acc = acc + cache[j]
      end
      j = j + 1
    end
  end
  return acc
end

-- B.slack returns, per dimension, how much more than costs (with keep,
-- as B.wait) a window will have room for w µs from now if nothing else
-- is admitted: what may be admitted now without delaying costs past w.
-- Window dimensions only; nil when a dimension is a bucket (whose room
-- refills continuously: anything taken now delays costs).
function B.slack(st, costs, keep, w)
  local out = {}
  for i = 1, st.n do
    if st.kind[i] ~= 'w' then return nil end
    local k = 0
    if keep ~= nil and keep[i] ~= nil then k = keep[i] end
    local slack = nil
    local checks = {{st.lim[i], st.sum[i] - st.credit[i], st.first[i], st.per[i], st.cred}}
    if st.sub[i] > 0 then checks[2] = {st.sublim[i], st.subsum[i] - st.subcredit[i], st.subfirst[i], st.sub[i], st.scred} end
    for _, ck in ipairs(checks) do
      local limit, sum, from, span, cred = ck[1], ck[2], ck[3], ck[4], ck[5]
      local room = limit - (sum - expiredby(st, i, from, span, w, cred)) - costs[i]
      if k > 0 then
        local share = k / st.burst[i]
        local horizon = math.floor(share * span)
        if keep.now then horizon = 0 end
        local hroom = limit - (sum - expiredby(st, i, from, span, w + horizon, cred)) - costs[i] - share * limit
        if hroom < room then room = hroom end
      end
      if slack == nil or room < slack then slack = room end
    end
    out[i] = slack
  end
  return out
end

-- B.wait returns the µs until costs (plus an amount to leave untouched,
-- keep[i], which may be nil; a window keeps it over a horizon unless
-- keep.now) fit, 0 when they fit now; or a negative
-- error code: -1 cost above burst, -2 negative cost, with the dimension.
function B.wait(st, costs, keep)
  local wait = 0
  for i = 1, st.n do
    local c = costs[i]
    if c < 0 then return -2, i end
    if c > st.burst[i] then return -1, i end
    local k = 0
    if keep ~= nil and keep[i] ~= nil then k = keep[i] end
    if st.kind[i] == 'w' then
      local w = windowwait(st, i, c, k, keep ~= nil and keep.now)
      if w > wait then wait = w end
    else
      -- the amount kept never makes a cost that fits the burst wait
      -- forever: at most, it needs the bucket full
      local need = math.min(c + k, st.burst[i]) * st.per[i]
      if st.level[i] < need then
        local w = math.ceil((need - st.level[i]) / st.lim[i])
        if w > wait then wait = w end
      end
    end
  end
  return wait, 0
end

local function refreshlevel(st, i)
  st.level[i] = st.lim[i] - (st.sum[i] - st.credit[i])
  local sub = st.sublim[i] - (st.subsum[i] - st.subcredit[i])
  if st.sub[i] > 0 and sub < st.level[i] then st.level[i] = sub end
end

function B.take(st, costs)
  for i = 1, st.n do
    if st.kind[i] == 'w' then
      if costs[i] ~= 0 then
        addslot(st, i, math.floor(st.now / st.slot[i]), costs[i], st.now)
        refreshlevel(st, i)
      end
    else
      st.level[i] = st.level[i] - costs[i] * st.per[i]
    end
  end
end
