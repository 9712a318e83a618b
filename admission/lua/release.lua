-- admission release: admitted tasks of one asynq queue go from where
-- asynq holds them (scheduled, or retry) to its pending list, as asynq's
-- Inspector.RunTask does, all of one admission's in one call and without
-- its per-task check that the queue exists (a task of a queue asynq
-- never saw has no hash: 0). A script of its own (not on the prelude):
-- its keys are asynq's, under the queue's hash tag.
-- KEYS[1] asynq:{q}:pending  KEYS[2] asynq:{q}:scheduled
--   KEYS[3] asynq:{q}:retry  KEYS[4] asynq:{q}:archived
--   KEYS[5] asynq:{q}:completed  KEYS[5 + i] asynq:{q}:t:<ARGV[i]>
-- ARGV[i] the task ids, one per task hash in KEYS
-- Reply: a code per task: 1 released, 0 no such task, -1 active,
--   -2 pending already, -3 another state (asynq's own RunTask does not
--   release it either: aggregating), -4 its state's set does not hold it
local from = {scheduled = KEYS[2], retry = KEYS[3], archived = KEYS[4], completed = KEYS[5]}
local out = {}
local function release(i, id, key)
  -- a task hash with no state (HSET made the field) is no task asynq
  -- holds: what HSET made goes, and the task is not pushed
  if redis.call('HSET', key, 'state', 'pending') == 1 then
    redis.call('DEL', key)
    out[i] = 0
    return
  end
  redis.call('LPUSH', KEYS[1], id)
  out[i] = 1
end
for i, id in ipairs(ARGV) do
  local key = KEYS[5 + i]
  -- most tasks wait scheduled: taken from that set, the task's state was
  -- 'scheduled' (asynq moves a task's set and state together), so its
  -- hash needs no read (the state's write says whether it is there);
  -- else its state says where it is
  if redis.call('ZREM', KEYS[2], id) == 1 then
    release(i, id, key)
  else
    local state = redis.call('HGET', key, 'state')
    if not state then
      out[i] = 0
    elseif state == 'active' then
      out[i] = -1
    elseif state == 'pending' then
      out[i] = -2
    elseif from[state] == nil then
      out[i] = -3
    elseif state == 'scheduled' or redis.call('ZREM', from[state], id) == 0 then
      out[i] = -4
    else
      release(i, id, key)
    end
  end
end
return out
