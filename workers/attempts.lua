-- attempts add: one more run of a job whose count record exists (a
-- later run, a run after a rebase or a twin's wait), counted across
-- processes and every kind of retry (Attempts.Add in retry.go; a first
-- run writes the record with one SET NX and needs no script). After
-- attempts_count.lua.
-- KEYS[1] the job's count record (string, attempts_count.lua's format)
-- KEYS[2] the job's record (hash: its move, its waits for a twin),
--   renewed with the count so a move lasts as long as the runs do
-- ARGV[1] now, unix ms: the first run's time when the record has none
-- ARGV[2] keep ms: both last that long after this run
-- Reply: {the record as written, 1 if this run wrote it first (it had
--   expired since the SET NX found it), else 0}
local stored = redis.call('GET', KEYS[1])
local c = countdecode(stored)
c.n = c.n + 1
if not c.first then c.first = ARGV[1] end
local record = countencode(c)
redis.call('SET', KEYS[1], record, 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {record, stored and 0 or 1}
