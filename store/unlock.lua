-- Release a lock only if it is still the caller's.
-- KEYS[1] lock  ARGV[1] the caller's token -> 1 released, 0 not held
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
