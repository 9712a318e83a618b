-- prq admission: the reservation codec, the one reader of the stored
-- form of what admit charged a ticket (the format: docs/limiter.md,
-- "Reservations"; Go's reader: reservation.go). The ops append marks
-- themselves (" s", " c", " t", " w", " a<µs>") and read them here.
-- Golden cases: testdata/reservations.json, which TestReservationGolden
-- runs through this file on Redis and through Go's parseReservation.
-- Uses: B, NKEYS
-- Defines: reservation, resmark, resstartat, resway, retimed, resdecode

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
    elseif f == 'c' or f == 'w' or f == 'a' or f == 't' then
      -- called, written, its way bounded: nothing more to read here
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
-- timed, written, way µs (-1)}, numbers formatted as B.fmt does.
local function resdecode(r)
  local costs, key, started, ids = reservation(r)
  local cs = {}
  for i, c in ipairs(costs) do cs[i] = B.fmt(c) end
  return {table.concat(cs, ' '), table.concat(ids or {}, ','), key or -1, started and 1 or 0,
    B.fmt(resstartat(r) or -1), resmark(r, 'c') and 1 or 0, resmark(r, 't') and 1 or 0,
    resmark(r, 'w') and 1 or 0, B.fmt(resway(r) or -1)}
end
