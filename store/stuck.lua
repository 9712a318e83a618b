-- Mark a run found running past its bound, once per head.
-- KEYS[1] run hash  ARGV[1] head
-- -> 1 marked now, 0 not the current head or marked already
if redis.call('HGET', KEYS[1], 'head') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'stuck') == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'stuck', ARGV[1])
return 1
