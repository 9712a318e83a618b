-- Record the 👍 and 👎 people gave one finding's comment, and keep the
-- totals by model and kind equal to the sum of every comment's latest
-- count: the comment's earlier count is taken off as the new one is put
-- on, so reading the same reactions again changes nothing.
-- KEYS[1] the comments' counts (a hash: comment -> "up down") of the
--         month the finding was posted
-- KEYS[2] the totals (a hash: "<model>|<kind>|up" and "…|down" -> n)
-- ARGV[1] the comment ("<installation>/<comment id>")
-- ARGV[2] the model and kind ("<model>|<kind>")
-- ARGV[3] up  ARGV[4] down  ARGV[5] KEYS[1]'s lifetime, seconds
-- -> the change in up, the change in down
local was_up, was_down = 0, 0
local was = redis.call('HGET', KEYS[1], ARGV[1])
if was then
  local u, d = string.match(was, '^(%d+) (%d+)$')
  was_up, was_down = tonumber(u) or 0, tonumber(d) or 0
end
local up, down = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], up .. ' ' .. down)
redis.call('EXPIRE', KEYS[1], ARGV[5])
if up ~= was_up then redis.call('HINCRBY', KEYS[2], ARGV[2] .. '|up', up - was_up) end
if down ~= was_down then redis.call('HINCRBY', KEYS[2], ARGV[2] .. '|down', down - was_down) end
return {up - was_up, down - was_down}
