-- batch lane keep: jobs' outcomes are kept until their result runs
-- record them.
-- KEYS[1] results hash
-- ARGV[1] how long the lane's keys are kept (ms)  ARGV[2..] job id,
-- outcome (JSON), job id, outcome, ...
-- Reply: the number kept
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return (#ARGV - 1) / 2
