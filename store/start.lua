-- Start (or restart) a pull request's run at a head, in one atomic step.
-- KEYS[1] run hash  KEYS[2] files hash of the head  KEYS[3] results hash
-- of the head  KEYS[4] posted hash
-- ARGV[1] head  ARGV[2] ttl ms  ARGV[3] run fields as JSON (an object)
-- ARGV[4..] files: index, JSON, index, JSON, ... (and "context", the
-- head's shared prompt context, when it has one)
-- -> {started (0|1), previous head or ""}
local cur = redis.call('HMGET', KEYS[1], 'head', 'state', 'last_reviewed', 'base', 'round')
local fields = cjson.decode(ARGV[3])
-- the same head is planned once, unless the run was cancelled (closed,
-- then reopened), its base changed (the diff is another) or a review of
-- it is asked for again (another round)
local rebased = fields['base'] ~= nil and fields['base'] ~= '' and cur[4] and cur[4] ~= '' and cur[4] ~= fields['base']
local reround = (fields['round'] or '') ~= '' and (fields['round'] or '') ~= (cur[5] or '')
if cur[1] == ARGV[1] and cur[2] ~= 'cancelled' and not rebased and not reround then
  return {0, ''}
end
local previous = ''
if cur[1] and (cur[1] ~= ARGV[1] or (reround and cur[2] ~= 'cancelled')) then
  -- another head, or this head's live run replaced by a new round: its
  -- waiting work is dropped
  previous = cur[1]
end
if cur[3] and cur[3] ~= '' and (fields['last_reviewed'] == nil or fields['last_reviewed'] == '') then
  fields['last_reviewed'] = cur[3]
end
redis.call('DEL', KEYS[2], KEYS[3])
-- a restarted run reports its last file again (closed and reopened)
redis.call('HDEL', KEYS[1], 'finalize_triggered', 'done_at', 'stuck', 'waiting_until')
local flat = {}
for k, v in pairs(fields) do
  flat[#flat + 1] = k
  flat[#flat + 1] = tostring(v)
end
redis.call('HSET', KEYS[1], unpack(flat))
-- the files in one HSET, in chunks unpack can take
for i = 4, #ARGV, 1000 do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
-- PEXPIRE leaves a key that does not exist alone
local ttl = tonumber(ARGV[2])
for i = 1, 4 do
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {1, previous}
