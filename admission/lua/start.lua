-- admission started and calling (one source, two scripts: OP names
-- which): the released task reached a handler, or is about to send.
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the id, then optionally
-- ARGV[3..] the model's dimensions (B.load, values unused) and the send
-- lag µs.
-- Reply: 0; calling on a window: the µs to wait before calling again
-- when the room it needs is not there yet.
-- started: the released task reached a handler; only that is recorded
-- for a token bucket (Go passes no dims for one; an auto limiter
-- counting in a bucket passes them and its call corrects it, below).
-- A window moves the charge from the slot of its admission: a job
-- that waited for a worker would otherwise stop counting here before it
-- stops counting there. Admission looks ahead (see ready below), so
-- the room it counted on may not be here yet: then the charge stays
-- where it is and the call waits for the room (a start does not: the
-- handler prepares its call meanwhile). The first start samples the
-- lag from admission to start (lag_us) and marks the reservation
-- started at now (" s<µs>"). The reply is 0.
-- calling: the job is about to send its call. A token bucket counts
-- refill from each admission on, but the provider's, which has seen
-- none of the calls admitted and not called yet (this one's included:
-- their sum is U, the key's uncalled sums of reservation.lua), stays
-- capped at full until they arrive: ours becomes min(full, level + U +
-- L) - U - L (L: the refill of the call's way, sendLag), what the
-- provider holds now less what it has not seen yet (never higher than
-- it is), so a bucket that was full when a burst was admitted, or a key
-- left idle (several keys: often), does not admit early after it. The
-- reservation is marked called (" c") and leaves the sums. A window:
-- its charge moves again, to now, so the handler's work
-- before the call (Redis reads, the prompt) is not left to the
-- margin; a charge its start moved needs no room (its old slot still
-- counts), one left at its admission may: then nothing changes and
-- the reply is the µs to wait before calling again. The first call
-- samples the time from the start (prep_us) and drops the start's
-- time from the mark.
-- Uses: B, OP, keystate, now, reservation, resat, resatset, resmark,
--   resstartat, retimed,
--   smooth, uctracked, ucload, ucadd, ucsave
-- the ticket leaves the released set at the start (a call comes after
-- it: nothing left to drop)
if OP == 'started' then
  redis.call('ZREM', KEYS[10], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[2])
end
if ARGV[3] == nil then return 0 end
local r = redis.call('HGET', KEYS[12], ARGV[2])
if not r then return 0 end
local charged, key, wasStarted, ids = reservation(r)
if key == nil then return 0 end
local st, last = B.load(keystate(key), ARGV, 2, now)
if st.n == 0 then return 0 end
charged = B.ondims(charged, ids, st)
-- after the dims: the µs from a call to its arrival at the provider
-- (Config.SendLag); a provider's bucket full meanwhile wastes that
-- refill, and ours, already charged, counts it
local sendLag = tonumber(ARGV[last + 1] or '') or 0
local costs = {}
for j = 1, st.n do costs[j] = charged[j] or 0 end
-- the call leaves the uncalled sums (a limiter that keeps them); U:
-- the sums, when read already
local function called(mark, U, fold)
  if uctracked(st) and not resmark(r, 'c') then
    U = U or ucload(st)
    ucadd(U, r, -1)
    ucsave(U, st, fold)
  end
  if not resmark(mark, 'c') then mark = mark .. ' c' end
  return mark
end
if st.kind[1] == 'b' then
  if OP == 'started' then return 0 end
  -- what the provider has not seen yet: this key's charges admitted
  -- and not called yet: the handler's work between its start and its
  -- call (tens of ms, more on a loaded machine) is refill ours counts
  -- and the provider's, capped at full, does not
  local U = ucload(st)
  local unseen = U[key] or {}
  local moved = false
  for j = 1, st.n do
    local u = (unseen[st.fid[j]] or 0) * st.per[j]
    local cap = st.burst[j] * st.per[j]
    if u > 0 then u = u + st.lim[j] * sendLag end
    if u > 0 and st.level[j] + u > cap then
      st.level[j] = cap - u
      moved = true
    end
  end
  -- the sums go with the state's save (one write) when it holds them
  local mark = called(r, U, moved)
  if moved then B.save(st) end
  if mark ~= r then redis.call('HSET', KEYS[12], ARGV[2], mark) end
  return 0
end
local at = resat(r, ARGV[2])
if not at then return 0 end
if at > now then at = now end
-- the samples of the look-ahead: admission to the first start, and
-- the first start to its call (a restart's long gap is not a lag:
-- samples are capped at the window's tenth)
local cap = math.floor(st.per[1] / 10)
local mark = r
if OP == 'started' and not wasStarted then
  smooth('lag', math.min(now - at, cap))
  mark = r .. ' s' .. B.fmt(now)
elseif OP == 'calling' then
  local s0 = resstartat(r)
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
  if mark ~= r then redis.call('HSET', KEYS[12], ARGV[2], mark) end
  if OP == 'started' then return 0 end -- the call waits
  return w
end
for j = 1, st.n do
  if st.kind[j] == 'w' and costs[j] > 0 then B.give(st, j, -costs[j]) end
end
B.save(st)
-- the time moved (to now): what was known of it goes; marked called,
-- and timed at the call (" t"): 'sent' moves the charge on from here
mark = resatset(retimed(mark), now, ARGV[2])
if OP == 'calling' then mark = called(mark) .. ' t' end
if mark ~= r then redis.call('HSET', KEYS[12], ARGV[2], mark) end
return 0
