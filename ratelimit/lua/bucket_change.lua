-- prq limiter library, part 4 of 4: changes to a loaded state (give
-- back, exact arrival, move, lower to a provider's count, block) and
-- B.save, which writes it back. Needs the three parts before it.
-- Uses: B, addslot, exactfield, fetch, readslots, refreshlevel,
--   slotfield, timefield
-- Defines: (nothing but B's functions)

-- B.give gives amount back to dimension i (negative: charges more, as
-- for usage beyond an estimate). at, when known, is when the amount was
-- charged (µs): a window gives it back in that slot, if it still counts.
-- A window charges more in the current slot, and keeps a give-back whose
-- time is unknown (it cannot know which slot held it: safe, not exact).
function B.give(st, i, amount, at)
  if st.kind[i] == 'w' then
    if amount < 0 then
      addslot(st, i, math.floor(st.now / st.slot[i]), -amount, st.now)
    elseif amount > 0 and at ~= nil then
      local j = math.floor(at / st.slot[i])
      if j >= st.first[i] and j <= st.newest[i] then
        local c = readslots(st, i, j, j)
        addslot(st, i, j, -math.min(amount, c[j]))
      end
    end
    refreshlevel(st, i)
    return
  end
  st.level[i] = st.level[i] + amount * st.per[i]
  local cap = st.burst[i] * st.per[i]
  if st.level[i] > cap then st.level[i] = cap end
end

-- B.exact records that amount of window dimension i, charged at at (µs),
-- is a call whose reply bounds its arrival at the provider by bound (µs):
-- once all of a slot's value is such calls, the slot stops counting a
-- window (and what 429s taught) after the latest of them (eend), not a
-- margin after its latest charge. Only in a slot still counting, and
-- never more than the slot holds. A call that arrived later than its
-- slot's hold allows (its way longer than the margin: a loaded machine,
-- a slow network) has its charge moved to where the slot holds it a
-- window after that arrival, as the provider does; where the margin is
-- measured, as for eend.
function B.exact(st, i, at, amount, bound)
  if st.kind[i] ~= 'w' or at == nil or amount <= 0 or bound < at then return end
  if st.margin[i] >= 0 then
    local to = math.min(bound - (st.per[i] - st.base[i] - st.learn[i] + st.margin[i]), st.now)
    if to > at and math.floor(to / st.slot[i]) >= st.first[i] then
      B.move(st, i, amount, at, to)
      at = to
    end
  end
  local j = math.floor(at / st.slot[i])
  if j < st.first[i] or j > st.newest[i] or j <= st.oldslot[i] then return end
  local c = readslots(st, i, j, j)
  local xc = st.xcache[i][j] or {0, 0}
  if xc[2] + amount > c[j] then return end
  st.xcache[i][j] = {math.max(xc[1], bound), xc[2] + amount}
  st.dirty[i][j] = true
end

-- B.move moves amount of window dimension i charged at from (µs) to a
-- later time to, no later than now: given back in from's slot if it still
-- counts, charged in to's (or, if that no longer counts, the oldest
-- counting).
function B.move(st, i, amount, from, to)
  B.give(st, i, amount, from)
  local j = math.floor(to / st.slot[i])
  local t = to
  if j < st.first[i] then j, t = st.first[i], nil end
  addslot(st, i, j, amount, t)
  refreshlevel(st, i)
end

-- B.lower brings dimension i down to what the provider reported
-- remaining as of age µs ago; it never raises. It reports whether it
-- lowered. A bucket has refilled since; a window compares the provider's
-- count then with its own then and books what it did not know of in the
-- slot of then (it stops counting no earlier than the provider's would).
-- Its count then is the running sum of the counting slots (first to
-- newest) less the slots it has and then had not, plus those then had
-- and it has not: a few slots each side when then is recent, where
-- summing then's window would read every slot of it.
-- upto (µs ago, at most age; nil: age) is the latest the provider may
-- have counted (a call's report is as of its arrival, between its write
-- and its reply): the window's own count runs to then, so a call of ours
-- charged between the write and the arrival, which the provider counted
-- too, is not booked twice (on a loaded machine a whole burst was,
-- stalling the model for a window).
function B.lower(st, i, remaining, age, upto)
  if st.kind[i] == 'w' then
    if age > st.per[i] then return false end -- too old to compare
    local g = st.slot[i]
    local at = st.now - age
    local from = math.max(math.floor((at - st.per[i]) / g), st.oldest[i])
    local to = math.min(math.floor((st.now - math.min(upto or age, age)) / g), st.newest[i])
    local ours = 0
    if to >= from then
      local f, h = st.first[i], st.newest[i]
      local parts = {{f, math.min(h, from - 1), -1}, {math.max(f, to + 1), h, -1}, {from, math.min(to, f - 1), 1}}
      local n = 0
      for _, p in ipairs(parts) do n = n + math.max(p[2] - p[1] + 1, 0) end
      if n < to - from + 1 then
        ours = st.sum[i]
      else
        parts = {{from, to, 1}}
      end
      local ranges = {} -- read in one command
      for _, p in ipairs(parts) do ranges[#ranges + 1] = {i, p[1], p[2]} end
      fetch(st, ranges)
      for _, p in ipairs(parts) do
        if p[2] >= p[1] then
          local c = readslots(st, i, p[1], p[2])
          for j = p[1], p[2] do ours = ours + p[3] * c[j] end
        end
      end
    end
    local extra = (st.lim[i] - remaining) - ours
    if extra <= 0 then return false end
    local j = math.floor(at / g)
    if j < st.first[i] then j = st.first[i] end
    addslot(st, i, j, extra)
    refreshlevel(st, i)
    return true
  end
  local theirs = remaining * st.per[i] + age * st.lim[i]
  if theirs < st.level[i] then
    st.level[i] = theirs
    return true
  end
  return false
end

-- B.block makes dimension i admit nothing for wait µs (after a 429). A
-- window also learns a longer margin: it admitted what the provider
-- still counted, so the provider counts calls later than it does (up to
-- a tenth of the window).
function B.block(st, i, wait)
  if st.kind[i] == 'w' then
    -- a longer span: the slots credited for a shorter one count again
    st.credit[i], st.subcredit[i], st.cred[i], st.scred[i] = 0, 0, {}, {}
    local g = st.slot[i]
    local learn = math.min(math.max(2 * st.learn[i], g), math.floor(st.base[i] / 10))
    st.per[i] = st.per[i] + learn - st.learn[i]
    if st.sub[i] > 0 then st.sub[i] = st.sub[i] + learn - st.learn[i] end
    st.learn[i] = learn
    -- the slot that stops counting at now+wait at the earliest
    local j = math.ceil((st.now + wait - st.per[i]) / g) - 1
    if j < st.first[i] then j = st.first[i] end
    local cur = math.floor(st.now / g)
    local far = cur + math.ceil(st.per[i] / g)
    if j > far then j = far end
    local after = 0
    if st.newest[i] >= j then
      local c = readslots(st, i, j, st.newest[i])
      for x = j, st.newest[i] do after = after + c[x] end
    end
    if after < st.lim[i] then addslot(st, i, j, st.lim[i] - after) end
    refreshlevel(st, i)
    return
  end
  local l = -wait * st.lim[i]
  if l < st.level[i] then st.level[i] = l end
end

function B.save(st)
  local t = B.fmt(math.max(st.now, st.last))
  local args = {'t', t, 'tv', t}
  if st.margins ~= nil then
    for x, f in ipairs({'ya', 'yc', 'yp'}) do
      args[#args + 1] = f
      args[#args + 1] = B.fmt(st.margins[x])
    end
  end
  if st.oldsave ~= nil then
    args[#args + 1] = 'ow'
    args[#args + 1] = B.fmt(st.oldsave)
  end
  -- fields to delete, of every dimension: one command
  local maxper, gone = 0, {}
  for f in pairs(st.xdirty or {}) do
    local v = st.extra[f]
    if v then args[#args + 1], args[#args + 2] = f, v else gone[#gone + 1] = f end
  end
  for i = 1, st.n do
    if st.kind[i] == 'w' then
      local pre = 'w' .. st.fid[i]
      for _, kv in ipairs({{'s', st.sum[i]}, {'u', st.subsum[i]}, {'p', st.first[i]}, {'q', st.subfirst[i]}, {'d', st.oldest[i]}, {'h', st.newest[i]}, {'g', st.slot[i]}, {'m', st.learn[i]}, {'e', st.oldest[i]}}) do
        args[#args + 1] = pre .. kv[1]
        args[#args + 1] = B.fmt(kv[2])
      end
      for j in pairs(st.dirty[i]) do
        if j >= st.oldest[i] then
          args[#args + 1] = slotfield(st.fid[i], j)
          args[#args + 1] = B.fmt(st.cache[i][j])
          local t = st.tcache[i][j]
          if t then
            args[#args + 1] = timefield(st.fid[i], j)
            args[#args + 1] = B.fmt(t) .. ':' .. B.fmt(st.cache[i][j])
          else
            gone[#gone + 1] = timefield(st.fid[i], j)
          end
          -- what is known of the slot's calls' arrival, beside its new
          -- value (a stale one is dropped)
          local xc = st.xcache[i][j]
          if xc then
            args[#args + 1] = exactfield(st.fid[i], j)
            args[#args + 1] = B.fmt(xc[1]) .. ':' .. B.fmt(xc[2]) .. ':' .. B.fmt(st.cache[i][j])
          elseif st.xstale[i][j] then
            gone[#gone + 1] = exactfield(st.fid[i], j)
          end
        end
      end
      for _, f in ipairs(st.del[i]) do gone[#gone + 1] = f end
      -- a window's state lives as long as its slots are kept
      if 3 * st.per[i] > maxper then maxper = 3 * st.per[i] end
    else
      args[#args + 1] = 'l' .. st.fid[i]
      args[#args + 1] = B.fmt(st.level[i])
      if st.per[i] > maxper then maxper = st.per[i] end
    end
  end
  for c = 1, #gone, 500 do
    redis.call('HDEL', st.key, unpack(gone, c, math.min(c + 499, #gone)))
  end
  -- an idle bucket refills to full; keep it two periods, then let it go;
  -- an auto state that found a window keeps that a week
  local ttl = math.floor(maxper / 1000) * 2 + 60000
  if st.auto == 'w' then ttl = math.max(ttl, 7 * 86400000) end
  local refresh = B.ttlrefresh(st, ttl)
  if refresh then
    args[#args + 1] = 'x'
    args[#args + 1] = B.fmt(refresh)
  end
  redis.call('HSET', st.key, unpack(args))
  if refresh then redis.call('PEXPIRE', st.key, ttl + B.TTLSLACK) end
end

-- B.TTLSLACK (ms) is how much longer than it needs a save keeps the
-- state, so the saves of the next second need not extend it again.
B.TTLSLACK = 1000

-- B.ttlrefresh says whether B.save must extend the state's TTL, which
-- must run at least ttl ms from every save (an expired state reads as
-- full, or empty, which is exact only for one left that long): the
-- expiry the last extension set (field x, Redis's ms) if it is still at
-- least ttl away (plus a ms of rounding) and no more than ttl +
-- B.TTLSLACK away (else the clock or ttl moved: extend), nil; else
-- the new expiry to record. A clock given to the script (tests) is not
-- Redis's, which expires keys: every save extends, and records 0 (no
-- expiry a save on Redis's clock could go by).
function B.ttlrefresh(st, ttl)
  if B.given then return 0 end
  local ms = math.floor(st.now / 1000)
  local left = (st.expiry or 0) - ms
  if left >= ttl + 1 and left <= ttl + B.TTLSLACK then return nil end
  return ms + ttl + B.TTLSLACK
end

-- B.towindow switches an auto state to its window (see B.load) and
-- returns the new state, or nil if it had switched already. What the
-- bucket has used of each dimension (its burst less its level) is
-- charged to the window's current slot: the provider still counts the
-- calls behind it.
function B.towindow(st, argv, base)
  if st.auto ~= 'b' then return nil end
  local used = {}
  for i = 1, st.n do
    used[i] = math.max(st.burst[i] - st.level[i] / st.per[i], 0)
  end
  redis.call('HSET', st.key, 'auto', 'w')
  local w = B.load(st.key, argv, base, st.now)
  for i = 1, w.n do
    if used[i] > 0 then addslot(w, i, math.floor(w.now / w.slot[i]), math.ceil(math.min(used[i], w.lim[i]))) end
    refreshlevel(w, i)
  end
  B.save(w)
  return w
end

-- B.available returns the whole units available per dimension.
function B.available(st)
  local out = {}
  for i = 1, st.n do
    if st.kind[i] == 'w' then
      out[i] = st.level[i]
    else
      out[i] = math.floor(st.level[i] / st.per[i])
    end
  end
  return out
end
