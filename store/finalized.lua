-- Mark a head published, only while it is the run's current head (a
-- finalize of a superseded head must not mark the newer run done).
-- KEYS[1] run hash  ARGV[1] head -> 1 marked, 0 not the current head
if redis.call('HGET', KEYS[1], 'head') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'state') == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'last_reviewed', ARGV[1])
return 1
