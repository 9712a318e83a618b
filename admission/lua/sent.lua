-- admission sent: the call's request was written.
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the id, ARGV[3..] the
-- model's dimensions (B.load, values unused), then after µs.
-- Reply: 1 the charge moved, 0 nothing to move.
-- The job's request was written
-- to the provider's connection at most after µs past its call (the
-- handler's clock, from before it sent 'calling'). A window moves the
-- charge from its call to then (not later than now: also a bound), so
-- what the process took between the call's decision and the write
-- (the reply from Redis, the request's encoding, a loaded scheduler's
-- delay: up to 100 ms on a busy 2-core machine) is measured, not left
-- to the margin, which covers the rest: the network to the provider.
-- The call's slot still counts (it stops counting a window later), so
-- the move needs no room. Only after 'calling' (" c"), whose time the
-- bound starts from; a token bucket has nothing to move.
-- Uses: B, keystate, now, reservation, resat, resatset, resmark
local r = redis.call('HGET', KEYS[12], ARGV[2])
if not r or not resmark(r, 'c') then return 0 end
local at = resat(r, ARGV[2])
if not at then return 0 end
local charged, key, _, ids = reservation(r)
if key == nil then return 0 end
local st, last = B.load(keystate(key), ARGV, 2, now)
charged = B.ondims(charged, ids, st)
local after = tonumber(ARGV[last + 1] or '') or 0
local to = math.min(at + after, now)
if st.n == 0 or st.kind[1] ~= 'w' or to <= at then return 0 end
for j = 1, st.n do
  if st.kind[j] == 'w' and (charged[j] or 0) > 0 then B.move(st, j, charged[j], at, to) end
end
B.save(st)
-- the charge's time is the write's now; marked written (" w"): it
-- bounds the write, which the call's way (given to settle) extends to
-- its arrival; only from a time a window's call set (" t": not a
-- bucket's, whose call kept its start's)
local mark = resatset(r, to, ARGV[2])
if resmark(r, 't') and not resmark(r, 'w') then mark = mark .. ' w' end
redis.call('HSET', KEYS[12], ARGV[2], mark)
return 1
