-- turn: a request of one key waits for its turn at the key's quotas.
-- KEYS[1] amounts   HASH  reservation id -> tokens it holds
-- KEYS[2] starts    ZSET  reservation id -> when it began (µs)
-- KEYS[3] waiters   ZSET  request id -> when it began waiting (µs)
-- KEYS[4] deadlines HASH  request id -> when it stops waiting (µs)
-- KEYS[5] dollars   HASH  reservation id -> nano-dollars it holds
-- ARGV: id, deadline_us, ttl_us, tokens, nano_dollars
-- It joins the waiters (once), drops reservations older than ttl (their
-- process is gone; the quotas keep them spent) and waiters past their
-- deadline, and when the request is the oldest waiter, holds tokens and
-- nano_dollars for it (the most it may reserve, until it knows what it
-- got).
-- -> {turn (1: it is the oldest waiter), tokens held by others,
--     start of the oldest other reservation (µs, 0: none), now (µs),
--     nano-dollars held by others}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local id, deadline, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, nano = tonumber(ARGV[4]), tonumber(ARGV[5])

for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%.0f', now - ttl))) do
  redis.call('HDEL', KEYS[1], old)
  redis.call('HDEL', KEYS[5], old)
  redis.call('ZREM', KEYS[2], old)
end
if redis.call('ZSCORE', KEYS[3], id) == false then
  redis.call('ZADD', KEYS[3], now, id)
  redis.call('HSET', KEYS[4], id, string.format('%.0f', deadline))
end
-- waiters whose process left them past their deadline
local turn = 0
while true do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head == nil then break end
  if head == id then turn = 1; break end
  local d = tonumber(redis.call('HGET', KEYS[4], head) or '0')
  if d >= now then break end
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[4], head)
end

-- what the others hold, of a hash of amounts
local function others(key)
  local sum = 0
  local amounts = redis.call('HGETALL', key)
  for i = 1, #amounts, 2 do
    if amounts[i] ~= id then sum = sum + tonumber(amounts[i + 1]) end
  end
  return sum
end
local held, heldnano, oldest = others(KEYS[1]), others(KEYS[5]), 0
local first = redis.call('ZRANGE', KEYS[2], 0, 1, 'WITHSCORES')
for i = 1, #first, 2 do
  if first[i] ~= id then oldest = tonumber(first[i + 1]); break end
end
if turn == 1 then
  redis.call('HSET', KEYS[1], id, string.format('%.0f', tokens))
  if nano > 0 then redis.call('HSET', KEYS[5], id, string.format('%.0f', nano)) end
  redis.call('ZADD', KEYS[2], now, id)
end
-- every key of a key's ledger lives while it is used
for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], math.floor(ttl / 1000) * 2) end
return {turn, string.format('%.0f', held), string.format('%.0f', oldest), string.format('%.0f', now), string.format('%.0f', heldnano)}
