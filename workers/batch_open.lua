-- batch lane open: a submitted batch is recorded, its jobs leave the
-- pending set, and its input tokens join the queue's count.
-- KEYS[1] open hash  KEYS[2] pending zset  KEYS[3] queued tokens
-- ARGV[1] batch id  ARGV[2] its record (JSON)  ARGV[3] its input tokens
-- ARGV[4] how long the lane's keys are kept (ms)  ARGV[5..] its job ids
-- Reply: 1
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
for i = 5, #ARGV do redis.call('ZREM', KEYS[2], ARGV[i]) end
redis.call('INCRBY', KEYS[3], ARGV[3])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
return 1
