-- prq admission: the reservation codec, the one reader of the stored
-- form of what admit charged a ticket (the format: docs/limiter.md,
-- "Reservations"; Go's reader: reservation.go). The ops append marks
-- themselves (" s", " c", " t", " w"; " a<µs>" only an older prq's
-- arrived wrote: settle takes the way now) and read them here.
-- Golden cases: testdata/reservations.json, which TestReservationGolden
-- runs through this file on Redis and through Go's parseReservation.
-- It also keeps the uncalled sums (below) in step with the reservations.
-- Uses: B, NKEYS
-- Defines: reservation, resmark, resstartat, resway, retimed, resat,
--   resatset, resdecode, uctracked, ucload, ucadd, ucsave, ucopened,
--   ucrecount

-- reservation reads a stored reservation: its costs, its key's index
-- (nil: a key no longer configured), whether its job has started, and
-- the ids of the dimensions the costs were charged to, in order (nil:
-- not named, by position). Read the costs through B.ondims.
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
    elseif f == 'c' or f == 'w' or f == 'a' or f == 't' or f == '@' then
      -- called, written, its way bounded, its charge's time: nothing
      -- more to read here
    else
      costs[#costs + 1] = tonumber(c)
    end
  end
  if key == nil or key < 0 or key >= NKEYS then key = nil end
  return costs, key, started, ids
end

-- resmark says whether reservation r carries the mark m ('c' called,
-- 't' timed at its call, 'w' bounding its write; 's' also matches a
-- window's 's<µs>').
local function resmark(r, m)
  return string.find(r, ' ' .. m, 1, true) ~= nil
end

-- resstartat returns a window's first start (the µs of " s<µs>"), or nil.
local function resstartat(r)
  return tonumber(string.match(r, ' s(%d+)') or '')
end

-- resway returns the bound on the call's way (the µs of " a<µs>"), or nil.
local function resway(r)
  return tonumber(string.match(r, ' a(%d+)') or '')
end

-- resat returns the charge's time (the µs of " @<µs>": admit's, moved by
-- started, calling and sent on a window), or, for a reservation an
-- older prq wrote without it, its score in the resage zset (KEYS[13]),
-- which only such a reservation has (nil: neither).
local function resat(r, id)
  local at = tonumber(string.match(r, ' @(%d+)') or '')
  if at == nil then at = tonumber(redis.call('ZSCORE', KEYS[13], id) or '') end
  return at
end

-- resatset returns r (job id's) with its charge's time set to t (µs);
-- one an older prq wrote leaves the resage zset, whose score resat
-- would no longer read.
local function resatset(r, t, id)
  local out, n = string.gsub(r, ' @%d+', ' @' .. B.fmt(t), 1)
  if n == 0 then
    redis.call('ZREM', KEYS[13], id)
    out = r .. ' @' .. B.fmt(t)
  end
  return out
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

-- resdecode reads every part of r (for the golden cases): {costs, dims
-- ids ("" none), key (-1: none in range), started, start µs (-1), called,
-- timed, written, way µs (-1), the charge's µs (-1)}, numbers formatted
-- as B.fmt does.
local function resdecode(r)
  local costs, key, started, ids = reservation(r)
  local cs = {}
  for i, c in ipairs(costs) do cs[i] = B.fmt(c) end
  return {table.concat(cs, ' '), table.concat(ids or {}, ','), key or -1, started and 1 or 0,
    B.fmt(resstartat(r) or -1), resmark(r, 'c') and 1 or 0, resmark(r, 't') and 1 or 0,
    resmark(r, 'w') and 1 or 0, B.fmt(resway(r) or -1), B.fmt(tonumber(string.match(r, ' @(%d+)') or '') or -1)}
end

-- The uncalled sums: per API key and dimension id, what the key's open
-- reservations not called yet (no " c") charged, for a token bucket's
-- correction at a call (start.lua), which would otherwise read every
-- reservation of the model. Kept in one field, "uncalled":
-- "<key>:<id>:<sum>" parts: of a model with one key, in its state hash
-- (KEYS[1]), so a script that loads and saves the state reads and writes
-- them with it (B.EXTRA; ucload and ucsave given the loaded state) at no
-- command of their own, and they expire with the state whose charges they
-- correct; of a model with several keys, in the vt hash (KEYS[8]), which
-- no key's idleness expires. Admit adds (ucopened), the call and a settle
-- before the call subtract, the reconciler's expire recounts them from the
-- reservations (ucrecount), which also repairs what a reconfiguration (a
-- key or a dimension gone) left. Only for a limiter that may count in a
-- token bucket (uctracked: 'b' or 'a'); a reservation without dimension
-- ids (written before they were) is not counted.
B.EXTRA = {'uncalled'}

-- uctracked says whether a loaded state's limiter keeps the sums.
local function uctracked(st)
  return st.n > 0 and (st.auto ~= nil or st.kind[1] == 'b')
end

-- uchome is the hash that keeps the sums.
local function uchome()
  if NKEYS == 1 then return KEYS[1] end
  return KEYS[8]
end

-- ucheld says whether st is the loaded state that holds the sums.
local function ucheld(st)
  return NKEYS == 1 and st ~= nil and st.key == KEYS[1] and st.extra ~= nil
end

-- ucload reads the sums: U[key][id] = sum; from st when it holds them,
-- else from Redis.
local function ucload(st)
  local raw
  if ucheld(st) then raw = st.extra.uncalled else raw = redis.call('HGET', uchome(), 'uncalled') end
  local U = {}
  for k, id, v in string.gmatch(raw or '', '(%d+):(%d+):(%d+)') do
    k = tonumber(k)
    U[k] = U[k] or {}
    U[k][tonumber(id)] = tonumber(v)
  end
  return U
end

-- ucadd adds reservation r's charges to U (sign -1: takes them out),
-- if r is counted: not called, its key in range, its dimensions named.
local function ucadd(U, r, sign)
  local costs, key, _, ids = reservation(r)
  if key == nil or ids == nil or resmark(r, 'c') then return end
  local u = U[key] or {}
  U[key] = u
  for x, id in ipairs(ids) do
    if costs[x] ~= nil then u[id] = math.max((u[id] or 0) + sign * costs[x], 0) end
  end
end

-- ucsave writes U (sums of 0 left out). Into st, when st holds them and
-- fold says the caller saves it after (B.save writes them with the
-- state; none as an empty field: no HDEL beside the state's HSET), or
-- when the state is not in Redis (a field alone would make a hash with
-- no TTL: the state, full as an absent one reads, is saved with them);
-- else to Redis, one command.
local function ucsave(U, st, fold)
  local parts = {}
  for k, u in pairs(U) do
    for id, v in pairs(u) do
      if v > 0 then parts[#parts + 1] = k .. ':' .. id .. ':' .. B.fmt(v) end
    end
  end
  table.sort(parts) -- one state, one form
  local v = table.concat(parts, ' ')
  if ucheld(st) and (fold or not st.exists) then
    if v ~= (st.extra.uncalled or '') then
      st.extra.uncalled, st.xdirty.uncalled = v, true
      if not fold then B.save(st) end
    end
  elseif v == '' then
    redis.call('HDEL', uchome(), 'uncalled')
  else
    redis.call('HSET', uchome(), 'uncalled', v)
  end
end

-- ucopened adds the reservations admit wrote (list: id, reservation,
-- ...) to the sums read with st, into st when saved says the caller
-- saves it (else to Redis: a state left unsaved stays as it was).
local function ucopened(st, list, saved)
  if #list == 0 or not uctracked(st) then return end
  local U = ucload(st)
  for i = 2, #list, 2 do ucadd(U, list[i], 1) end
  ucsave(U, st, saved)
end

-- ucrecount sets the sums from the reservations (none: not tracked), st
-- KEYS[1]'s loaded state, and drops them where they are not kept (an
-- older prq kept them in vt; a model's keys changed in number).
local function ucrecount(tracked, st)
  local U = {}
  if tracked then
    for _, r in ipairs(redis.call('HVALS', KEYS[12])) do ucadd(U, r, 1) end
  end
  ucsave(U, st, false)
  if NKEYS == 1 then
    redis.call('HDEL', KEYS[8], 'uncalled')
  else
    redis.call('HDEL', KEYS[1], 'uncalled')
  end
end
