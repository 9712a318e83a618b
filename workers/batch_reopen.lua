-- batch lane reopen: a batch the provider refused for want of room
-- closes, and its jobs are pending again, as when they were handed.
-- KEYS[1] open hash  KEYS[2] pending zset  KEYS[3] queued tokens
-- ARGV[1] batch id  ARGV[2] its input tokens  ARGV[3] when it was
-- submitted (unix ms, their place)  ARGV[4..] its job ids
-- Reply: 1 reopened, 0 not open
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
for i = 4, #ARGV do redis.call('ZADD', KEYS[2], ARGV[3], ARGV[i]) end
local left = redis.call('DECRBY', KEYS[3], ARGV[2])
if left < 0 then redis.call('SET', KEYS[3], 0, 'KEEPTTL') end
return 1
