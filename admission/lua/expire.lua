-- admission expire: the reconciler ends the reservations nobody settled
-- (a job that crashed, a settle that failed), taking them out of the
-- uncalled sums, and now and then recounts the sums from the
-- reservations (what a reconfiguration left: a key or a dimension gone).
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the oldest charge time
-- kept µs (at most 1000 charged before it expire a call), ARGV[3]
-- 'recount' or '', ARGV[4..] the model's dimensions (B.load, values
-- unused).
-- Reply: the number of reservations expired.
-- A reservation's charge time is its " @<µs>" (resat); one an older prq
-- wrote has none, and its time in the resage zset instead.
-- Uses: B, now, ucadd, ucload, ucrecount, ucsave, uctracked
local old = tonumber(ARGV[2])
local stale, gone = {}, {}
local all = redis.call('HGETALL', KEYS[12])
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i + 1], ' @(%d+)') or '')
  if at ~= nil and at <= old and #stale < 1000 then stale[#stale + 1] = {all[i], all[i + 1]} end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[13], '-inf', old, 'LIMIT', 0, 1000)) do
  local r = redis.call('HGET', KEYS[12], id)
  if r and not string.find(r, ' @', 1, true) then stale[#stale + 1] = {id, r} end
  gone[#gone + 1] = id
end
if #stale == 0 and #gone == 0 and ARGV[3] ~= 'recount' then return 0 end
local st = B.load(KEYS[1], ARGV, 3, now)
local tracked = uctracked(st)
if #stale > 0 then
  local ids = {}
  if tracked and ARGV[3] ~= 'recount' then
    local U = ucload(st)
    for _, s in ipairs(stale) do ucadd(U, s[2], -1) end
    ucsave(U, st, false)
  end
  for _, s in ipairs(stale) do ids[#ids + 1] = s[1] end
  redis.call('HDEL', KEYS[12], unpack(ids))
end
if #gone > 0 then redis.call('ZREM', KEYS[13], unpack(gone)) end
if ARGV[3] == 'recount' then ucrecount(tracked, st) end
return #stale
