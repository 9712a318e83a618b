-- admission settle: a call's usage replaces (or adds to) its charge and
-- its reservation ends.
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the id, ARGV[3] policy:
-- refund (usage replaces the estimate), debt (usage beyond the estimate
-- is added) or estimate (the estimate stays); ARGV[4..] the model's
-- dimensions (B.load), their values the actual usage (-1 unknown);
-- then optionally the call's way µs and its write µs (-1: not known),
-- then optionally the provider's report (Go's ratelimit.Report) to
-- lower a key's bucket to: the key's index, age µs, upto µs and the
-- remaining count per dimension (-1: unknown).
-- Reply: 1 settled, 0 no reservation (a report is still lowered to).
-- The way: the call's reply came, and bounds the way from its write to
-- the provider by this (the reply's first byte less the write and the
-- provider's processing, the least margin added), so the provider
-- counted it by the charge's time (its write, after 'sent') plus the
-- way. The write: the request was written at most this long after
-- the call, and 'sent' did not move the charge there yet (the caller
-- holds it a while: most calls settle first): the charge moves here,
-- as 'sent' does.
-- A reservation settled before its call leaves the uncalled sums.
-- The report: the bucket's sync (bucket.lua's op sync) in this script,
-- before the settle as the sync ran before it: the key's bucket is
-- lowered to the provider's count as of the call's arrival (B.lower),
-- never raised.
-- Uses: B, NKEYS, keystate, now, reservation, resat, resmark, resway, ucadd,
--   ucload, ucsave, uctracked
local r = redis.call('HGET', KEYS[12], ARGV[2])
-- the report, after the dimensions (their kinds' argument counts) and
-- the way
local rep = nil
do
  local e = B.dimsend(ARGV, 3)
  local k = tonumber(ARGV[e + 3] or '')
  if k ~= nil and k >= 0 and k < NKEYS then rep = {key = k, at = e + 3} end
end
local function lower(st)
  local age = math.max(tonumber(ARGV[rep.at + 1]) or 0, 0)
  local upto = math.max(tonumber(ARGV[rep.at + 2]) or age, 0)
  local lowered = false
  for i = 1, st.n do
    local v = tonumber(ARGV[rep.at + 2 + i] or '') or -1
    if v >= 0 and B.lower(st, i, v, age, upto) then lowered = true end
  end
  return lowered
end
local charged, key, _, ids = nil, nil, nil, nil
if r then charged, key, _, ids = reservation(r) end
if rep ~= nil and rep.key ~= key then
  -- no reservation of the report's key to settle: the sync alone
  local st = B.load(keystate(rep.key), ARGV, 3, now)
  if lower(st) then B.save(st) end
  rep = nil
end
if not r then return 0 end
if key ~= nil then -- else its key is gone: nothing to correct
  local st, last = B.load(keystate(key), ARGV, 3, now)
  if rep ~= nil then lower(st) end
  charged = B.ondims(charged, ids, st)
  -- where the charge is (its admission, or its start): a window gives
  -- back in that slot, if it still counts (a token bucket has no slots)
  local windowed, at = false, nil
  for i = 1, st.n do windowed = windowed or st.kind[i] == 'w' end
  if windowed then at = resat(r, ARGV[2]) end
  -- a written call (" w": its charge's time bounds the write) whose
  -- reply bounded its way (here, or a reservation's " a<µs>" of an
  -- older prq's arrived): what stays charged at its write stops
  -- counting by its arrival (B.exact)
  local written = resmark(r, 'w')
  local after = tonumber(ARGV[last + 2] or '')
  if after ~= nil and after >= 0 and not written and at ~= nil and resmark(r, 'c') and st.kind[1] == 'w' then
    -- sent.lua's move, from the call's time to the write's (no later
    -- than now); marked written only from a time a window's call set
    local to = math.min(at + after, now)
    if to > at then
      for j = 1, st.n do
        if st.kind[j] == 'w' and (charged[j] or 0) > 0 then B.move(st, j, charged[j], at, to) end
      end
      at, written = to, resmark(r, 't')
    end
  end
  local way = resway(r)
  local given = tonumber(ARGV[last + 1] or '')
  if way == nil and given ~= nil and given >= 0 and written then way = math.floor(given) end
  for i = 1, st.n do
    if charged[i] ~= nil then
      -- an unknown actual (-1: usage not split into input and output)
      -- leaves the charge
      local delta = charged[i] - st.val[i]
      -- what stays charged at its write: the estimate, or less what a
      -- refund gave back there (usage beyond it is charged now, elsewhere)
      local kept = charged[i]
      if st.val[i] >= 0 and (ARGV[3] == 'refund' or (delta < 0 and ARGV[3] == 'debt')) then
        B.give(st, i, delta, at)
        if ARGV[3] == 'refund' then kept = math.min(charged[i], st.val[i]) end
      end
      if way ~= nil and at ~= nil then B.exact(st, i, at, kept, at + way) end
    end
  end
  if uctracked(st) and not resmark(r, 'c') then
    local U = ucload(st)
    ucadd(U, r, -1)
    ucsave(U, st, true)
  end
  B.save(st)
end
redis.call('HDEL', KEYS[12], ARGV[2])
-- a reservation an older prq wrote (no " @") has its time in resage
if not string.find(r, ' @', 1, true) then redis.call('ZREM', KEYS[13], ARGV[2]) end
return 1
