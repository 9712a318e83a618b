-- batch lane hand: a job's request joins the lane, once.
-- KEYS[1] items hash  KEYS[2] pending zset  KEYS[3] results hash
-- ARGV[1] job id  ARGV[2] the item (JSON)  ARGV[3] handed (unix ms)
-- ARGV[4] how long the lane's keys are kept (ms)
-- Reply: 1 handed; 0 handed already, or its result is back
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
