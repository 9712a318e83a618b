-- Take a lock for an owner: free, or held by an earlier attempt of the same
-- owner (a job that runs again after its process died takes back what it
-- left; another owner waits for the holder or its expiry).
-- KEYS[1] lock  ARGV[1] owner  ARGV[2] this attempt's token  ARGV[3] ttl ms -> 1 taken, 0 held by another
local held = redis.call('GET', KEYS[1])
local value = ARGV[1] .. '|' .. ARGV[2]
if held and string.sub(held, 1, #ARGV[1] + 1) ~= ARGV[1] .. '|' then return 0 end
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
return 1
