-- turn: a request of one key waits for its turn at the key's quota.
-- KEYS[1] amounts   HASH  reservation id -> tokens it holds
-- KEYS[2] starts    ZSET  reservation id -> when it began (µs)
-- KEYS[3] waiters   ZSET  request id -> when it began waiting (µs)
-- KEYS[4] deadlines HASH  request id -> when it stops waiting (µs)
-- ARGV: id, deadline_us, ttl_us, amount
-- It joins the waiters (once), drops reservations older than ttl (their
-- process is gone; the quota keeps them spent) and waiters past their
-- deadline, and when the request is the oldest waiter, holds amount for
-- it (the most it may reserve, until it knows what it got).
-- -> {turn (1: it is the oldest waiter), tokens held by others,
--     start of the oldest other reservation (µs, 0: none), now (µs)}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local id, deadline, ttl, amount = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%.0f', now - ttl))) do
  redis.call('HDEL', KEYS[1], old)
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

local held, oldest = 0, 0
local amounts = redis.call('HGETALL', KEYS[1])
for i = 1, #amounts, 2 do
  if amounts[i] ~= id then held = held + tonumber(amounts[i + 1]) end
end
local first = redis.call('ZRANGE', KEYS[2], 0, 1, 'WITHSCORES')
for i = 1, #first, 2 do
  if first[i] ~= id then oldest = tonumber(first[i + 1]); break end
end
if turn == 1 then
  redis.call('HSET', KEYS[1], id, string.format('%.0f', amount))
  redis.call('ZADD', KEYS[2], now, id)
end
-- every key of a key's ledger lives while it is used
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], math.floor(ttl / 1000) * 2) end
return {turn, string.format('%.0f', held), string.format('%.0f', oldest), string.format('%.0f', now)}
