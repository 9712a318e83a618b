-- attempts wait: one more wait of a job for a twin answering its
-- prompt (Attempts.ReuseWait), counted in the job's record; the run
-- that waited is taken off its count (a wait is no attempt). After
-- attempts_count.lua.
-- KEYS[1] the job's count record (string, attempts_count.lua's format)
-- KEYS[2] the job's record (hash: reuse_waits, its move)
-- ARGV[1] keep ms: both last that long
-- Reply: the job's waits so far, this one included
local waits = redis.call('HINCRBY', KEYS[2], 'reuse_waits', 1)
redis.call('PEXPIRE', KEYS[2], ARGV[1])
local c = countdecode(redis.call('GET', KEYS[1]))
c.n = c.n - 1
redis.call('SET', KEYS[1], countencode(c), 'PX', ARGV[1])
return waits
