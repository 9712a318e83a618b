-- prq limiter library, part 1 of 4 (bucket_slots.lua, bucket_load.lua,
-- bucket_wait.lua, bucket_change.lua, concatenated in that order into
-- one chunk: LuaLibrary): multi-dimensional limits decided all-or-nothing.
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
--
-- Uses: (nothing)
-- Defines: B, fetch, readslots, addslot, eend, recount, credits,
--   slotfield, timefield, exactfield

local B = {}

function B.fmt(x) return string.format('%.0f', x) end

-- B.clock returns the time in µs: the override when given, else Redis TIME.
function B.clock(override)
  if override ~= nil and override ~= '' then
    B.given = true -- not Redis's clock: B.save refreshes the TTL at each save
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function slotfield(i, j) return 'w' .. i .. ':' .. B.fmt(j) end
local function timefield(i, j) return 'w' .. i .. ':' .. B.fmt(j) .. 't' end
local function exactfield(i, j) return 'w' .. i .. ':' .. B.fmt(j) .. 'x' end

-- fetch reads, in one HMGET (in chunks: unpack has a stack limit), the
-- slots not cached yet of ranges {i, a, b} (window dimension i's slots
-- a..b): their values (st.cache[i]), their latest charges' times in
-- st.tcache[i] (false: not known), and what is known of their calls'
-- arrival in st.xcache[i] ({x, e}: e of the slot's value is calls whose
-- replies bound their arrival at the provider, the latest by x; false:
-- none known. See B.exact). A single slot is read for every window
-- dimension with the same slot length at once: a charge, a give-back or
-- a move goes through the dimensions one by one, in the same slot, and
-- fields read along cost less than another command (a walk over many
-- slots reads its own dimension's: each slot read costs parsing).
local function fetch(st, ranges)
  local want, idx, seen = {}, {}, {}
  for _, r in ipairs(ranges) do
    for k = 1, st.n do
      if k == r[1] or (r[2] == r[3] and st.kind[k] == 'w' and st.slot[k] == st.slot[r[1]]) then
        local cache = st.cache[k]
        seen[k] = seen[k] or {}
        for j = r[2], r[3] do
          if cache[j] == nil and not seen[k][j] then
            seen[k][j] = true
            want[#want + 1] = slotfield(st.fid[k], j)
            want[#want + 1] = timefield(st.fid[k], j)
            want[#want + 1] = exactfield(st.fid[k], j)
            idx[#idx + 1] = {k, j}
          end
        end
      end
    end
  end
  for c = 1, #want, 498 do
    local part = {}
    for x = c, math.min(c + 497, #want) do part[#part + 1] = want[x] end
    local got = redis.call('HMGET', st.key, unpack(part))
    for x = 1, #part, 3 do
      local k, j = idx[(c + x + 1) / 3][1], idx[(c + x + 1) / 3][2]
      local v = tonumber(got[x] or '') or 0
      st.cache[k][j] = v
      st.tcache[k][j] = false
      local ts, tv = string.match(got[x + 1] or '', '^(%d+):(%-?%d+)$')
      if ts and tonumber(tv) == v then st.tcache[k][j] = tonumber(ts) end
      st.xcache[k][j] = false
      local xs, xe, xv = string.match(got[x + 2] or '', '^(%d+):(%d+):(%-?%d+)$')
      if xs and tonumber(xv) == v then
        st.xcache[k][j] = {tonumber(xs), tonumber(xe)}
      elseif got[x + 2] then
        st.xstale[k][j] = true -- written beside another value: dropped
      end
    end
  end
end

-- readslots returns the values of slots a..b of window dimension i,
-- read once a script call (fetch): the admission loop may ask several
-- times (walks ask often: a read is only built for a slot not cached).
local function readslots(st, i, a, b)
  local cache = st.cache[i]
  for j = a, b do
    if cache[j] == nil then
      fetch(st, {{i, a, b}})
      break
    end
  end
  return cache
end

-- slotend returns the time of the latest charge slot j of window
-- dimension i may hold: its own, else the slot's last µs.
local function slotend(st, i, j)
  local t = st.tcache[i][j]
  if t and j > st.oldslot[i] then return t end
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
  if st.margin[i] < 0 or j <= st.oldslot[i] then return t end
  local xc, v = st.xcache[i][j], st.cache[i][j]
  if not xc or v <= 0 or xc[2] < v then return t end
  local off = st.per[i] - st.base[i] - st.learn[i] + st.margin[i]
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
  if j >= st.first[i] then st.sum[i] = st.sum[i] + amount end
  if st.sub[i] > 0 and j >= st.subfirst[i] then st.subsum[i] = st.subsum[i] + amount end
  if j > st.newest[i] then st.newest[i] = j end
end

-- recount brings one check of window dimension i (its first counting
-- slot pos[i] and its sum sums[i]; lo the first slot its span reaches,
-- from the time from on) back over slots a longer span counts again, and
-- past the slot lo when that slot's latest charge is before from.
local function recount(st, i, lo, from, pos, sums)
  local back = math.max(lo, st.oldest[i])
  if pos[i] > back then
    local top = math.min(pos[i] - 1, st.newest[i])
    if top >= back then
      local c = readslots(st, i, back, top)
      for j = back, top do sums[i] = sums[i] + c[j] end
    end
    pos[i] = back
  end
  if pos[i] == lo and lo <= st.newest[i] then
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
  local off = st.per[i] - st.base[i] - st.learn[i] + st.margin[i]
  local from = st.now - span
  local top = math.min(st.newest[i], math.floor((from + off) / st.slot[i]))
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
