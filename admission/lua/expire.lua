-- admission expire: the reconciler ends the reservations nobody settled
-- (a job that crashed, a settle that failed), taking them out of the
-- uncalled sums, and now and then recounts the sums from the
-- reservations (what a reconfiguration left: a key or a dimension gone).
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the oldest charge time
-- kept µs (at most 1000 charged before it expire a call), ARGV[3]
-- 'recount' or '', ARGV[4..] the model's dimensions (B.load, values
-- unused).
-- Reply: the number of reservations expired.
-- Uses: B, now, ucadd, ucload, ucrecount, ucsave, uctracked
local stale = redis.call('ZRANGEBYSCORE', KEYS[13], '-inf', ARGV[2], 'LIMIT', 0, 1000)
if #stale == 0 and ARGV[3] ~= 'recount' then return 0 end
local st = B.load(KEYS[1], ARGV, 3, now)
local tracked = uctracked(st)
if #stale > 0 then
  if tracked and ARGV[3] ~= 'recount' then
    local U = ucload(st)
    for _, r in ipairs(redis.call('HMGET', KEYS[12], unpack(stale))) do
      if r then ucadd(U, r, -1) end
    end
    ucsave(U)
  end
  redis.call('HDEL', KEYS[12], unpack(stale))
  redis.call('ZREM', KEYS[13], unpack(stale))
end
if ARGV[3] == 'recount' then ucrecount(tracked) end
return #stale
