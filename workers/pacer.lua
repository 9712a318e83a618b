-- An installation's GitHub write lane, shared by every process.
-- KEYS[1] next slot (ms)  KEYS[2] line: zset writer -> class * 1e13 + joined ms
-- KEYS[3] hash writer -> last asked (ms)
-- KEYS[4] held until (ms): GitHub's retry time after a rate limit
-- KEYS[5] '1' while anyone may be in the line: set with the line's TTL
-- wherever a writer stays in it, deleted when the line empties, so a
-- take reads it with the slot in one MGET. It may outlive the line (the
-- line expired: the next writer through the line finds itself alone in
-- it and deletes it as it writes), never the reverse.
--
-- KEYS[1] is the lane's theoretical next slot: each write books one gap
-- after it (or after now, if it has passed). A chat reply may go while
-- the next slot is at most ARGV[8] ms ahead of now, every other write
-- only once it has come; so in any span t the lane writes at most
-- t/gap + ARGV[8]/gap + 1 times, and batch writes keep their spacing.
-- ARGV[1] op  ARGV[2] now ms ('' = Redis TIME)
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[2])
end
local keep = 3600000
local op = ARGV[1]

if op == 'take' then
  -- ARGV[3] writer  ARGV[4] class  ARGV[5] gap ms  ARGV[6] stale ms  ARGV[7] poll ms
  -- ARGV[8] how far ahead of now the next slot may be for this writer (ms)
  -- -> 0: the slot is the writer's (next slot booked), else ms to wait
  local me, gap, stale, poll = ARGV[3], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  local ahead = tonumber(ARGV[8] or '0') or 0
  local v = redis.call('MGET', KEYS[1], KEYS[4], KEYS[5])
  local next = tonumber(v[1] or '0')
  local from = math.max(next - ahead, tonumber(v[2] or '0'))
  -- nobody waits (no mark; this writer neither): it would head the line
  -- whatever its class, so a free slot is its own without joining it
  local lined = v[3] ~= false
  if not lined and from <= now then
    local booked = math.max(next, now) + gap
    redis.call('SET', KEYS[1], booked, 'PX', booked - now + keep)
    return 0
  end
  redis.call('ZADD', KEYS[2], 'NX', tonumber(ARGV[4]) * 1e13 + now, me)
  redis.call('HSET', KEYS[3], me, now)
  -- the head is the first writer still asking; one that stopped (its
  -- process died) leaves the line (alone in it, this writer heads it)
  local head, alone = me, true
  while lined do
    local two = redis.call('ZRANGE', KEYS[2], 0, 1)
    head, alone = two[1], two[2] == nil
    if head == me then break end
    local seen = tonumber(redis.call('HGET', KEYS[3], head) or '0')
    if now - seen <= stale then break end
    redis.call('ZREM', KEYS[2], head)
    redis.call('HDEL', KEYS[3], head)
  end
  if head == me and from <= now then
    if alone then
      -- the line empties: its keys and the mark go in one DEL
      redis.call('DEL', KEYS[2], KEYS[3], KEYS[5])
    else
      redis.call('ZREM', KEYS[2], me)
      redis.call('HDEL', KEYS[3], me)
    end
    local booked = math.max(next, now) + gap
    redis.call('SET', KEYS[1], booked, 'PX', booked - now + keep)
    return 0
  end
  redis.call('PEXPIRE', KEYS[2], keep)
  redis.call('PEXPIRE', KEYS[3], keep)
  redis.call('SET', KEYS[5], '1', 'PX', keep) -- after the line's: it lives as long
  if from > now then return from - now end
  return poll -- the slot is free, and another writer's turn

elseif op == 'leave' then
  -- ARGV[3] writer
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('HDEL', KEYS[3], ARGV[3])
  if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('DEL', KEYS[5]) end
  return 0

elseif op == 'hold' then
  -- ARGV[3] ms nobody may write for (GitHub's retry time)
  -- (a chat reply may not run ahead of it: KEYS[4])
  local after = tonumber(ARGV[3])
  local next = tonumber(redis.call('GET', KEYS[1]) or '0')
  if now + after > next then redis.call('SET', KEYS[1], now + after, 'PX', after + keep) end
  local held = tonumber(redis.call('GET', KEYS[4]) or '0')
  if now + after > held then redis.call('SET', KEYS[4], now + after, 'PX', after + keep) end
  return 0
end
return redis.error_reply('pacer: unknown op ' .. tostring(op))
