-- Claim a signed delivery body's digest for a delivery id, for the window.
-- KEYS[1] claim  ARGV[1] delivery id  ARGV[2] window (ms) -> the id that holds it
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
