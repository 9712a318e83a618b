-- admission process: worker processes' liveness, and putting a dead
-- process's jobs back. A script of its own (not on the prelude).
-- KEYS: beat, dead, alive: KEYS[1] the processes zset (process -> last
--   beat µs); requeue: KEYS[1] asynq's active list, KEYS[2] its lease
--   zset, KEYS[3] the task hash, KEYS[4] the retry zset (held) or the
--   pending list
-- ARGV[1] op (beat|dead|alive|requeue)  ARGV[2] now µs ('' = Redis
--   TIME); the rest per op, below
-- Reply: per op, below; an unknown op is an error reply.
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local op = ARGV[1]

if op == 'beat' then
  -- KEYS[1] zset: process -> last beat µs  ARGV[3] process
  -- ARGV[4] ttl µs (optional): the beat also answers 'dead' (below)
  redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[3])
  if ARGV[4] == nil then return 0 end
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[4])), 'WITHSCORES', 'LIMIT', 0, 100)

elseif op == 'dead' then
  -- KEYS[1] zset of processes  ARGV[3] ttl µs
  -- -> process, last beat µs, ... for those silent longer than ttl
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[3])), 'WITHSCORES', 'LIMIT', 0, 100)

elseif op == 'alive' then
  -- KEYS[1] zset of processes  ARGV[3] ttl µs -> those that beat within it
  return redis.call('ZRANGEBYSCORE', KEYS[1], string.format('%d', now - tonumber(ARGV[3])), '+inf')

elseif op == 'requeue' then
  -- a task a dead process was running, still active in asynq, goes back:
  -- held (a ticket is registered next) or to the front of pending.
  -- KEYS[1] active list  KEYS[2] lease zset  KEYS[3] task hash
  -- KEYS[4] retry zset (held) or pending list
  -- ARGV[3] task id  ARGV[4] dead process  ARGV[5] latest lease (unix s)
  -- the dead process can have held  ARGV[6] 'held' or 'pending'
  -- ARGV[7] held until (unix s)
  -- -> 1 moved, 0 not the dead process's any more
  local id = ARGV[3]
  if redis.call('HGET', KEYS[3], 'prq_recovered_from') == ARGV[4] then return 0 end
  local lease = redis.call('ZSCORE', KEYS[2], id)
  if not lease or tonumber(lease) > tonumber(ARGV[5]) then return 0 end
  if redis.call('LREM', KEYS[1], 0, id) == 0 then return 0 end
  redis.call('ZREM', KEYS[2], id)
  if ARGV[6] == 'held' then
    redis.call('ZADD', KEYS[4], tonumber(ARGV[7]), id)
    redis.call('HSET', KEYS[3], 'state', 'retry', 'prq_recovered_from', ARGV[4])
  else
    redis.call('RPUSH', KEYS[4], id)
    redis.call('HSET', KEYS[3], 'state', 'pending', 'pending_since', string.format('%d', now * 1000), 'prq_recovered_from', ARGV[4])
  end
  return 1
end
return redis.error_reply('admission: unknown process op ' .. tostring(op))
