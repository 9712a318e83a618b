-- attempts add: one more run of a job, counted across processes and
-- every kind of retry (Attempts.Add in retry.go), in one round trip.
-- KEYS[1] the job's record (hash: n, first, rebased, and the move's
--   fields, which this leaves alone)
-- ARGV[1] now, unix ms: the first run's time when the record has none
-- ARGV[2] keep ms: the record lasts that long after this run
-- Reply: {runs so far (this one included), the first run's (or the
--   rebase's) unix ms, 1 if the budget was started again (rebased)}
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
local first, rebased = ARGV[1], 0
-- a first count (n = 1) most often makes the record: HSETNX writes the
-- first run and reads nothing back. A later count (or a count after a
-- rebase or a twin's wait, which keep the first run) reads it; a record
-- with no first run yet has no rebase either (Rebase writes both).
if n ~= 1 or redis.call('HSETNX', KEYS[1], 'first', ARGV[1]) == 0 then
  local v = redis.call('HMGET', KEYS[1], 'first', 'rebased')
  if v[1] then
    first = v[1]
    if v[2] then rebased = 1 end
  else
    redis.call('HSET', KEYS[1], 'first', ARGV[1])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {n, first, rebased}
