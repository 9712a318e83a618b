-- admission expire: the reconciler's scan ends the reservations nobody
-- settled (a job that crashed, a settle that failed) and recounts the
-- uncalled sums from the reservations left (which also mends what a
-- reconfiguration left: a key or a dimension gone).
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the oldest charge time
-- kept µs (at most 1000 charged before it expire a call), ARGV[3..] the
-- model's dimensions (B.load, values unused).
-- Reply: the number of reservations expired.
-- A reservation's charge time is its " @<µs>" (resat); one an older prq
-- wrote has none, and its time in the resage zset instead.
-- Uses: B, now, ucrecount, uctracked
local old = tonumber(ARGV[2])
local stale, gone = {}, {}
local all = redis.call('HGETALL', KEYS[12])
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i + 1], ' @(%d+)') or '')
  if at ~= nil and at <= old and #stale < 1000 then stale[#stale + 1] = all[i] end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[13], '-inf', old, 'LIMIT', 0, 1000)) do
  local r = redis.call('HGET', KEYS[12], id)
  if r and not string.find(r, ' @', 1, true) then stale[#stale + 1] = id end
  gone[#gone + 1] = id
end
if #stale > 0 then redis.call('HDEL', KEYS[12], unpack(stale)) end
if #gone > 0 then redis.call('ZREM', KEYS[13], unpack(gone)) end
local st = B.load(KEYS[1], ARGV, 2, now)
ucrecount(uctracked(st), st)
return #stale
