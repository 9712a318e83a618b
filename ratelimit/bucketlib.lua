-- prq limiter library: multi-dimensional limits decided all-or-nothing.
-- Shared by ratelimit's own script and by scripts that must charge a
-- bucket in the same atomic step (the admission scheduler).
--
-- Each dimension is one of two kinds:
--
-- bucket ('b'): a token bucket. Levels are stored scaled by the period in
-- microseconds (level = tokens * period_us), so refill (elapsed_us *
-- limit) is exact integer arithmetic in Lua's doubles (exact below 2^53).
--
-- window ('w'): at most limit in any window (t-W, t], and optionally at
-- most sub_limit in any sub-window (t-S, t]. Admissions are summed into
-- slots of slot_us (field wI:<slot>); a running sum of the slots that
-- still count (those from the slot holding t-W, so a slot's partial
-- overlap is counted whole: never over, at most one slot conservative)
-- and one of the sub-window's are kept, and slots are dropped from the
-- sums as time passes: each slot is read once per sum, so a decision
-- costs O(1) amortised and at most the window's slots after idleness.
-- A slot also keeps the time of its latest charge (field wI:<slot>t,
-- "time:value"), so it stops counting a span after that charge, not
-- after the slot's end: on average half a slot sooner. The time holds
-- only while the slot's value is the one written beside it (a writer
-- that knows no times, an older prq, changes the value), and only for
-- slots that began after the last save of such a writer: it writes the
-- state's time t and not tv, so a load that finds t past tv knows one
-- saved since (field ow, its time), and what it may have done without
-- changing a value (move a charge within a slot) stays in slots up to
-- then, which count to their ends. Time fields such a writer left when
-- it dropped old slots are dropped later (wIe: up to which they are).
-- Slots stay stored for a second window after they stop counting, so a
-- provider's report of some seconds ago can be compared with ours then.
--
-- Numbers are written with %.0f: tostring keeps only 14 significant digits.

local B = {}

function B.fmt(x) return string.format('%.0f', x) end

-- B.clock returns the time in µs: the override when given, else Redis TIME.
function B.clock(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function slotfield(i, j) return 'w' .. i .. ':' .. B.fmt(j) end
local function timefield(i, j) return 'w' .. i .. ':' .. B.fmt(j) .. 't' end
local function exactfield(i, j) return 'w' .. i .. ':' .. B.fmt(j) .. 'x' end

-- readslots returns the values of slots a..b of window dimension i
-- (cached in st: the admission loop may ask several times), their latest
-- charges' times in st.tcache[i] (false: not known), and what is known
-- of their calls' arrival in st.xcache[i] ({x, e}: e of the slot's
-- value is calls whose replies bound their arrival at the provider, the
-- latest by x; false: none known. See B.exact).
local function readslots(st, i, a, b)
  local cache, tcache, xcache = st.cache[i], st.tcache[i], st.xcache[i]
  local want, idx = {}, {}
  for j = a, b do
    if cache[j] == nil then
      want[#want + 1] = slotfield(st.fid[i], j)
      want[#want + 1] = timefield(st.fid[i], j)
      want[#want + 1] = exactfield(st.fid[i], j)
      idx[#idx + 1] = j
    end
  end
  -- HMGET in chunks: unpack has a stack limit
  for c = 1, #want, 498 do
    local part = {}
    for k = c, math.min(c + 497, #want) do part[#part + 1] = want[k] end
    local got = redis.call('HMGET', st.key, unpack(part))
    for k = 1, #part, 3 do
      local j = idx[(c + k - 1 + 2) / 3]
      local v = tonumber(got[k] or '') or 0
      cache[j] = v
      tcache[j] = false
      local ts, tv = string.match(got[k + 1] or '', '^(%d+):(%-?%d+)$')
      if ts and tonumber(tv) == v then tcache[j] = tonumber(ts) end
      xcache[j] = false
      local xs, xe, xv = string.match(got[k + 2] or '', '^(%d+):(%d+):(%-?%d+)$')
      if xs and tonumber(xv) == v then
        xcache[j] = {tonumber(xs), tonumber(xe)}
      elseif got[k + 2] then
        st.xstale[i][j] = true -- written beside another value: dropped
      end
    end
  end
  return cache
end

-- slotend returns the time of the latest charge slot j of window
-- dimension i may hold: its own, else the slot's last µs.
local function slotend(st, i, j)
  local t = st.tcache[i][j]
  if t and j > st.owslot[i] then return t end
  return (j + 1) * st.slot[i] - 1
end

-- eend is slotend, or sooner for a slot whose every charge's call has
-- replied (B.exact): the latest arrival its replies bound, less the
-- margin in force (the slot then stops counting a window, and what was
-- learned from 429s, after that arrival). Only where this process's
-- margin is measured (the margin is then the measured one, not a
-- guess of how the provider counts) and never later than slotend. The
-- slot must be read.
local function eend(st, i, j)
  local t = slotend(st, i, j)
  if st.own[i] < 0 or j <= st.owslot[i] then return t end
  local xc, v = st.xcache[i][j], st.cache[i][j]
  if not xc or v <= 0 or xc[2] < v then return t end
  local off = st.per[i] - st.base[i] - st.learn[i] + st.own[i]
  return math.min(t, xc[1] - off)
end

-- addslot adds amount to slot j of window dimension i; a charge (amount
-- > 0) made at time t (nil: not known) moves the slot's latest time.
local function addslot(st, i, j, amount, t)
  local cache = readslots(st, i, j, j)
  -- a slot that stopped counting by its calls' arrival counts again
  -- once anything else is charged in it
  if st.cred[i][j] then
    st.credit[i] = st.credit[i] - st.cred[i][j]
    st.cred[i][j] = nil
  end
  if st.scred[i][j] then
    st.subcredit[i] = st.subcredit[i] - st.scred[i][j]
    st.scred[i][j] = nil
  end
  if amount > 0 then
    local old = st.tcache[i][j]
    if t == nil then
      st.tcache[i][j] = false
    elseif cache[j] <= 0 then
      st.tcache[i][j] = t
    elseif old then
      st.tcache[i][j] = math.max(old, t)
    end
  end
  cache[j] = cache[j] + amount
  st.dirty[i][j] = true
  if j >= st.p[i] then st.sum[i] = st.sum[i] + amount end
  if st.sub[i] > 0 and j >= st.q[i] then st.subsum[i] = st.subsum[i] + amount end
  if j > st.h[i] then st.h[i] = j end
end

-- recount brings one check of window dimension i (its first counting
-- slot pos[i] and its sum sums[i]; lo the first slot its span reaches,
-- from the time from on) back over slots a longer span counts again, and
-- past the slot lo when that slot's latest charge is before from.
local function recount(st, i, lo, from, pos, sums)
  local back = math.max(lo, st.d[i])
  if pos[i] > back then
    local top = math.min(pos[i] - 1, st.h[i])
    if top >= back then
      local c = readslots(st, i, back, top)
      for j = back, top do sums[i] = sums[i] + c[j] end
    end
    pos[i] = back
  end
  if pos[i] == lo and lo <= st.h[i] then
    local c = readslots(st, i, lo, lo)
    if c[lo] > 0 and slotend(st, i, lo) < from then
      sums[i] = sums[i] - c[lo]
      pos[i] = lo + 1
    end
  end
end

-- credits finds, in one check of window dimension i (its first counting
-- slot pos, its span), the slots slotend still counts that stopped
-- counting by their calls' arrival (eend): their values are credited
-- (in cred[i], taken off the check's sum) while nothing else is charged
-- in them. Such slots are near the check's start: a slot begins no
-- later than its calls' arrival, and eend is that less the margin.
local function credits(st, i, pos, span, cred)
  local off = st.per[i] - st.base[i] - st.learn[i] + st.own[i]
  local from = st.now - span
  local top = math.min(st.h[i], math.floor((from + off) / st.slot[i]))
  if top < pos then return 0 end
  local total = 0
  local c = readslots(st, i, pos, top)
  for j = pos, top do
    if c[j] > 0 and eend(st, i, j) < from then
      cred[i][j] = c[j]
      total = total + c[j]
    end
  end
  return total
end

-- B.load reads n dimensions from argv at base+1 (count) and then per
-- dimension its kind and values: 'b', limit, period_us, burst, value; or
-- 'w', limit, window_us, sub_us (0: none), sub_limit, slot_us, value,
-- margin_us; or 'a' (auto), limit, period_us, burst, value, window_us,
-- sub_us, sub_limit, slot_us, margin_us: a token bucket ('b') until
-- B.towindow has found the provider counting in a window (the state's
-- field auto is 'w'), then a window ('w'), in every process at once.
-- margin_us is the part of window_us (and sub_us) that is the caller's
-- measured margin, -1 when it is not measured: a window holds the
-- longest measured margin any process held in this and the last window
-- (fields ya, yc, yp), so a process whose calls find the provider sooner
-- does not let go of another's that took longer.
-- It brings the state up to now and returns it and the index of the last
-- argument it read. st.burst[i] is the most one call may ever take.
function B.load(key, argv, base, now)
  local st = {key = key, now = now, kind = {}, fid = {}, lim = {}, per = {}, burst = {}, val = {}, level = {},
    sub = {}, sublim = {}, slot = {}, sum = {}, subsum = {}, p = {}, q = {}, d = {}, h = {}, base = {}, learn = {}, own = {},
    cache = {}, tcache = {}, dirty = {}, del = {}, xcache = {}, xstale = {}, cred = {}, scred = {}, credit = {}, subcredit = {}}
  local n = tonumber(argv[base + 1])
  st.n = n
  local b = base + 1
  for i = 1, n do
    -- a dimension's kind, then its stable id ('b2'): its state's fields
    -- are named by the id, so adding or removing another dimension
    -- leaves them in place
    local kind, fid = string.match(argv[b + 1] or '', '^(%a)(%d*)$')
    st.fid[i] = tonumber(fid) or i
    local v
    if kind == 'a' then
      if st.auto == nil then st.auto = redis.call('HGET', key, 'auto') or 'b' end
      if st.auto == 'w' then
        v = {'w', argv[b + 2], argv[b + 6], argv[b + 7], argv[b + 8], argv[b + 9], argv[b + 5], argv[b + 10]}
      else
        v = {'b', argv[b + 2], argv[b + 3], argv[b + 4], argv[b + 5]}
      end
      b = b + 10
    elseif kind == 'w' then
      v = {'w', argv[b + 2], argv[b + 3], argv[b + 4], argv[b + 5], argv[b + 6], argv[b + 7], argv[b + 8]}
      b = b + 8
    elseif kind == 'b' then
      v = {'b', argv[b + 2], argv[b + 3], argv[b + 4], argv[b + 5]}
      b = b + 5
    else
      error('bucket: unknown limiter kind ' .. tostring(kind))
    end
    kind = v[1]
    st.kind[i] = kind
    st.lim[i] = tonumber(v[2])
    st.per[i] = tonumber(v[3])
    if kind == 'w' then
      st.sub[i] = tonumber(v[4])
      st.sublim[i] = tonumber(v[5])
      st.slot[i] = tonumber(v[6])
      st.val[i] = tonumber(v[7])
      st.own[i] = tonumber(v[8] or '') or -1
      st.burst[i] = st.lim[i]
      if st.sub[i] > 0 and st.sublim[i] < st.burst[i] then st.burst[i] = st.sublim[i] end
      st.cache[i], st.tcache[i], st.dirty[i], st.del[i] = {}, {}, {}, {}
      st.xcache[i], st.xstale[i], st.cred[i], st.scred[i] = {}, {}, {}, {}
      st.credit[i], st.subcredit[i] = 0, 0
    else
      st.burst[i] = tonumber(v[4])
      st.val[i] = tonumber(v[5])
    end
  end
  local fields = {'t'}
  for i = 1, n do
    if st.kind[i] == 'w' then
      for _, f in ipairs({'s', 'u', 'p', 'q', 'd', 'h', 'g', 'm', 'e'}) do fields[#fields + 1] = 'w' .. st.fid[i] .. f end
    else
      fields[#fields + 1] = 'l' .. st.fid[i]
    end
  end
  local nf = #fields
  for _, f in ipairs({'tv', 'ow', 'ya', 'yc', 'yp'}) do fields[#fields + 1] = f end
  local stored = redis.call('HMGET', key, unpack(fields))
  st.last = tonumber(stored[1] or '') or now
  -- the last save of a writer that knows no slot times (see above)
  local tv, t0 = tonumber(stored[nf + 1] or ''), tonumber(stored[1] or '')
  st.ow = tonumber(stored[nf + 2] or '')
  if t0 ~= nil and (tv == nil or t0 > tv) then st.ow = t0 end
  st.owslot = {}
  -- the longest measured margin of this window and the last (epochs of
  -- the window's length): what every measured process holds
  local shared = -1
  for i = 1, n do
    if st.kind[i] == 'w' and st.own[i] >= 0 and st.y == nil then
      local w = math.max(st.per[i] - st.own[i], 1)
      local e = math.floor(now / w)
      local ya, yc, yp = tonumber(stored[nf + 3] or ''), tonumber(stored[nf + 4] or '') or 0, tonumber(stored[nf + 5] or '') or 0
      if ya ~= e then
        if ya == e - 1 then yp, yc = yc, 0 else yp, yc = 0, 0 end
      end
      local own = 0
      for j = 1, n do
        if st.kind[j] == 'w' and st.own[j] > own then own = st.own[j] end
      end
      yc = math.max(yc, own)
      st.y = {e, yc, yp}
      shared = math.max(yc, yp)
    end
  end
  local elapsed = now - st.last
  if elapsed < 0 then elapsed = 0 end
  local k = 2
  for i = 1, n do
    if st.kind[i] == 'w' then
      local g = st.slot[i]
      -- learned margin: a 429 while the window admitted means the
      -- provider counts calls later than we do; hold admissions longer
      local oldg0 = tonumber(stored[k + 6] or '')
      st.base[i] = st.per[i]
      st.learn[i] = tonumber(stored[k + 7] or '') or 0
      if oldg0 ~= g then st.learn[i] = 0 end
      local longer = 0
      if st.own[i] >= 0 and shared > st.own[i] then longer = shared - st.own[i] end
      st.per[i] = st.per[i] + longer + st.learn[i]
      if st.sub[i] > 0 then st.sub[i] = st.sub[i] + longer + st.learn[i] end
      local lo = math.floor((now - st.per[i]) / g)
      local los = lo
      if st.sub[i] > 0 then los = math.floor((now - st.sub[i]) / g) end
      local lod = math.floor((now - 2 * st.per[i]) / g)
      local s, u, p, q, d, h = stored[k], stored[k + 1], stored[k + 2], stored[k + 3], stored[k + 4], stored[k + 5]
      local oldg = oldg0
      -- time fields are dropped up to slot e (below: older writers')
      local e = tonumber(stored[k + 8] or '')
      k = k + 9
      st.owslot[i] = -1
      if st.ow ~= nil then st.owslot[i] = math.floor(st.ow / g) end
      if p and oldg ~= g then
        -- the window was reconfigured: its slots mean other times; start
        -- afresh (as a new bucket starts full) and drop the old slots
        local from, to = tonumber(d) or 0, tonumber(h) or -1
        for j = from, math.min(to, from + 30000) do
          st.del[i][#st.del[i] + 1] = slotfield(st.fid[i], j)
          st.del[i][#st.del[i] + 1] = timefield(st.fid[i], j)
          st.del[i][#st.del[i] + 1] = exactfield(st.fid[i], j)
        end
        p = false
      end
      if p == false or p == nil then
        st.sum[i], st.subsum[i], st.p[i], st.q[i], st.d[i], st.h[i] = 0, 0, lo, los, lod, lo - 1
      else
        st.sum[i], st.subsum[i] = tonumber(s) or 0, tonumber(u) or 0
        st.p[i], st.q[i], st.d[i], st.h[i] = tonumber(p), tonumber(q) or los, tonumber(d) or lod, tonumber(h) or lo - 1
        -- slots leaving the sub-window, then the window, then storage;
        -- none past the newest written (the walks stay bounded)
        if st.sub[i] > 0 and st.q[i] < los then
          local top = math.min(los - 1, st.h[i])
          if top >= st.q[i] then
            local c = readslots(st, i, st.q[i], top)
            for j = st.q[i], top do st.subsum[i] = st.subsum[i] - c[j] end
          end
          st.q[i] = los
        end
        if st.p[i] < lo then
          local top = math.min(lo - 1, st.h[i])
          if top >= st.p[i] then
            local c = readslots(st, i, st.p[i], top)
            for j = st.p[i], top do st.sum[i] = st.sum[i] - c[j] end
          end
          st.p[i] = lo
        end
        -- a longer span than the last decision's (its margin measured
        -- longer, in this process or another, or learned): slots that
        -- stopped counting count again, as long as they are kept; and
        -- the oldest slot still counting stops at its latest charge's
        -- time and the span, before its end's. The window, then the
        -- sub-window.
        recount(st, i, lo, now - st.per[i], st.p, st.sum)
        if st.sub[i] > 0 then recount(st, i, los, now - st.sub[i], st.q, st.subsum) end
        -- an older writer dropped slots below d and left their times
        if e ~= nil and e < st.d[i] then
          for j = e, math.min(st.d[i] - 1, e + 30000) do
            st.del[i][#st.del[i] + 1] = timefield(st.fid[i], j)
            st.del[i][#st.del[i] + 1] = exactfield(st.fid[i], j)
          end
        end
        if st.d[i] < lod then
          for j = st.d[i], math.min(lod - 1, st.h[i]) do
            st.del[i][#st.del[i] + 1] = slotfield(st.fid[i], j)
            st.del[i][#st.del[i] + 1] = timefield(st.fid[i], j)
            st.del[i][#st.del[i] + 1] = exactfield(st.fid[i], j)
          end
          st.d[i] = lod
        end
      end
      -- slots whose calls all replied stop counting by their arrival
      if st.own[i] >= 0 then
        st.credit[i] = credits(st, i, st.p[i], st.per[i], st.cred)
        if st.sub[i] > 0 then st.subcredit[i] = credits(st, i, st.q[i], st.sub[i], st.scred) end
      end
      if st.sub[i] == 0 then st.q[i] = st.p[i] end
      st.level[i] = st.lim[i] - (st.sum[i] - st.credit[i])
      if st.sub[i] > 0 and st.sublim[i] - (st.subsum[i] - st.subcredit[i]) < st.level[i] then st.level[i] = st.sublim[i] - (st.subsum[i] - st.subcredit[i]) end
    else
      local cap = st.burst[i] * st.per[i]
      local l = tonumber(stored[k] or '') or cap
      k = k + 1
      l = l + elapsed * st.lim[i]
      if l > cap then l = cap end
      st.level[i] = l
    end
  end
  return st, b
end

-- slotwait returns the µs until need more has stopped counting in one
-- check of window dimension i (its limit's span from slot from), oldest
-- slots first, read a few at a time: usually the first free enough.
local function slotwait(st, i, need, from, span, cred)
  local h = st.h[i]
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
-- as k, so the window still fills.
local function windowwait(st, i, c, k)
  local wait = 0
  local checks = {{st.lim[i], st.sum[i] - st.credit[i], st.p[i], st.per[i], st.cred}}
  if st.sub[i] > 0 then checks[2] = {st.sublim[i], st.subsum[i] - st.subcredit[i], st.q[i], st.sub[i], st.scred} end
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
        local w = slotwait(st, i, kneed, from, span, cred) - math.floor(share * span)
        if w > wait then wait = w end
      end
    end
  end
  return wait
end

-- expiredby returns how much of one check of window dimension i (its
-- span, from slot from) stops counting within tw µs from now.
local function expiredby(st, i, from, span, tw, cred)
  local acc, j, h = 0, from, st.h[i]
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
    local checks = {{st.lim[i], st.sum[i] - st.credit[i], st.p[i], st.per[i], st.cred}}
    if st.sub[i] > 0 then checks[2] = {st.sublim[i], st.subsum[i] - st.subcredit[i], st.q[i], st.sub[i], st.scred} end
    for _, ck in ipairs(checks) do
      local limit, sum, from, span, cred = ck[1], ck[2], ck[3], ck[4], ck[5]
      local room = limit - (sum - expiredby(st, i, from, span, w, cred)) - costs[i]
      if k > 0 then
        local share = k / st.burst[i]
        local hroom = limit - (sum - expiredby(st, i, from, span, w + math.floor(share * span), cred)) - costs[i] - share * limit
        if hroom < room then room = hroom end
      end
      if slack == nil or room < slack then slack = room end
    end
    out[i] = slack
  end
  return out
end

-- B.wait returns the µs until costs (plus an amount to leave untouched,
-- keep[i], which may be nil) fit, 0 when they fit now; or a negative
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
      local w = windowwait(st, i, c, k)
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
      if j >= st.p[i] and j <= st.h[i] then
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
-- never more than the slot holds.
function B.exact(st, i, at, amount, bound)
  if st.kind[i] ~= 'w' or at == nil or amount <= 0 or bound < at then return end
  local j = math.floor(at / st.slot[i])
  if j < st.p[i] or j > st.h[i] or j <= st.owslot[i] then return end
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
  if j < st.p[i] then j, t = st.p[i], nil end
  addslot(st, i, j, amount, t)
  refreshlevel(st, i)
end

-- B.lower brings dimension i down to what the provider reported
-- remaining as of age µs ago; it never raises. It reports whether it
-- lowered. A bucket has refilled since; a window compares the provider's
-- count then with its own then and books what it did not know of in the
-- slot of then (it stops counting no earlier than the provider's would).
function B.lower(st, i, remaining, age)
  if st.kind[i] == 'w' then
    if age > st.per[i] then return false end -- too old to compare
    local g = st.slot[i]
    local at = st.now - age
    local from = math.max(math.floor((at - st.per[i]) / g), st.d[i])
    local to = math.min(math.floor(at / g), st.h[i])
    local ours = 0
    if to >= from then
      local c = readslots(st, i, from, to)
      for j = from, to do ours = ours + c[j] end
    end
    local extra = (st.lim[i] - remaining) - ours
    if extra <= 0 then return false end
    local j = math.floor(at / g)
    if j < st.p[i] then j = st.p[i] end
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
    if j < st.p[i] then j = st.p[i] end
    local cur = math.floor(st.now / g)
    local far = cur + math.ceil(st.per[i] / g)
    if j > far then j = far end
    local after = 0
    if st.h[i] >= j then
      local c = readslots(st, i, j, st.h[i])
      for x = j, st.h[i] do after = after + c[x] end
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
  if st.y ~= nil then
    for x, f in ipairs({'ya', 'yc', 'yp'}) do
      args[#args + 1] = f
      args[#args + 1] = B.fmt(st.y[x])
    end
  end
  if st.ow ~= nil then
    args[#args + 1] = 'ow'
    args[#args + 1] = B.fmt(st.ow)
  end
  local maxper = 0
  for i = 1, st.n do
    if st.kind[i] == 'w' then
      local pre = 'w' .. st.fid[i]
      for _, kv in ipairs({{'s', st.sum[i]}, {'u', st.subsum[i]}, {'p', st.p[i]}, {'q', st.q[i]}, {'d', st.d[i]}, {'h', st.h[i]}, {'g', st.slot[i]}, {'m', st.learn[i]}, {'e', st.d[i]}}) do
        args[#args + 1] = pre .. kv[1]
        args[#args + 1] = B.fmt(kv[2])
      end
      local untimed = {}
      for j in pairs(st.dirty[i]) do
        if j >= st.d[i] then
          args[#args + 1] = slotfield(st.fid[i], j)
          args[#args + 1] = B.fmt(st.cache[i][j])
          local t = st.tcache[i][j]
          if t then
            args[#args + 1] = timefield(st.fid[i], j)
            args[#args + 1] = B.fmt(t) .. ':' .. B.fmt(st.cache[i][j])
          else
            untimed[#untimed + 1] = timefield(st.fid[i], j)
          end
          -- what is known of the slot's calls' arrival, beside its new
          -- value (a stale one is dropped)
          local xc = st.xcache[i][j]
          if xc then
            args[#args + 1] = exactfield(st.fid[i], j)
            args[#args + 1] = B.fmt(xc[1]) .. ':' .. B.fmt(xc[2]) .. ':' .. B.fmt(st.cache[i][j])
          elseif st.xstale[i][j] then
            untimed[#untimed + 1] = exactfield(st.fid[i], j)
          end
        end
      end
      if #untimed > 0 then
        for c = 1, #untimed, 500 do
          local part = {}
          for x = c, math.min(c + 499, #untimed) do part[#part + 1] = untimed[x] end
          redis.call('HDEL', st.key, unpack(part))
        end
      end
      if #st.del[i] > 0 then
        for c = 1, #st.del[i], 500 do
          local part = {}
          for x = c, math.min(c + 499, #st.del[i]) do part[#part + 1] = st.del[i][x] end
          redis.call('HDEL', st.key, unpack(part))
        end
      end
      -- a window's state lives as long as its slots are kept
      if 3 * st.per[i] > maxper then maxper = 3 * st.per[i] end
    else
      args[#args + 1] = 'l' .. st.fid[i]
      args[#args + 1] = B.fmt(st.level[i])
      if st.per[i] > maxper then maxper = st.per[i] end
    end
  end
  redis.call('HSET', st.key, unpack(args))
  -- an idle bucket refills to full; keep it two periods, then let it go;
  -- an auto state that found a window keeps that a week
  local ttl = math.floor(maxper / 1000) * 2 + 60000
  if st.auto == 'w' then ttl = math.max(ttl, 7 * 86400000) end
  redis.call('PEXPIRE', st.key, ttl)
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
