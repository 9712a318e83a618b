-- Record a per-file result once and count it; report the last one.
-- KEYS[1] run hash   KEYS[2] results hash of the head
-- ARGV[1] head  ARGV[2] field (kind:index)  ARGV[3] result JSON
-- ARGV[4] kind  ARGV[5] 1 when skipped for quota  ARGV[6] ttl ms  ARGV[7] now ms
-- ARGV[8] the job's run (its start, ms), 0 when unknown
-- -> 0 stale head or duplicate, 1 recorded, 2 recorded and last (finalize)
-- The run's counters are read with its head: nothing else writes them
-- while the script runs, so the counts after this result are computed
-- here, not read again.
local run = redis.call('HMGET', KEYS[1], 'head', 'state', 'created', 'summary_total', 'summary_done', 'review_total', 'review_done')
if run[1] ~= ARGV[1] or run[2] == 'cancelled' then return 0 end
-- a job of an earlier run of this head (ARGV[8]: its run's start)
if ARGV[8] ~= '0' and ARGV[8] ~= run[3] then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 0 then return 0 end
local st, sd, rt, rd = tonumber(run[4]) or 0, tonumber(run[5]) or 0, tonumber(run[6]) or 0, tonumber(run[7]) or 0
local done = redis.call('HINCRBY', KEYS[1], ARGV[4] .. '_done', 1)
if ARGV[4] == 'summary' then sd = done elseif ARGV[4] == 'review' then rd = done end
-- the run's first result creates the results hash (StartRun deleted it;
-- carried results set their own TTL): it gets its TTL in the same step,
-- and lives at least as long as the run (a wait for a quota may have
-- made the run outlive ARGV[6]; a later wait extends both), so it never
-- expires under a live run and comes back with no TTL
if sd + rd == 1 then
  local ttl = tonumber(ARGV[6])
  local runttl = redis.call('PTTL', KEYS[1])
  if runttl > ttl then ttl = runttl end
  redis.call('PEXPIRE', KEYS[2], ttl)
end
if ARGV[5] == '1' then redis.call('HINCRBY', KEYS[1], 'skipped_quota', 1) end
if sd >= st and rd >= rt then
  -- when the head's files were all done: the reconciler finalizes a run
  -- left done and unfinalized some time after this
  redis.call('HSET', KEYS[1], 'done_at', ARGV[7])
  if redis.call('HSETNX', KEYS[1], 'finalize_triggered', ARGV[1]) == 1 then return 2 end
  if redis.call('HGET', KEYS[1], 'finalize_triggered') ~= ARGV[1] then
    redis.call('HSET', KEYS[1], 'finalize_triggered', ARGV[1])
    return 2
  end
end
return 1
