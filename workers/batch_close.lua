-- batch lane close: a collected batch closes and its input tokens leave
-- the queue's count.
-- KEYS[1] open hash  KEYS[2] queued tokens
-- ARGV[1] batch id  ARGV[2] its input tokens
-- Reply: 1 closed, 0 not open
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local left = redis.call('DECRBY', KEYS[2], ARGV[2])
if left < 0 then redis.call('SET', KEYS[2], 0, 'KEEPTTL') end
return 1
