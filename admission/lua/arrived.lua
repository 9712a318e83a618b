-- admission arrived: what the reply says of the call's way.
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the id, ARGV[3] way µs.
-- Reply: 1 kept, 0 nothing to keep (no written call, or kept already).
-- The call's reply came; the way from its
-- write to the provider is at most way (the reply's first byte less
-- the write and the provider's processing), so the provider counted it
-- by the charge's time (its write, after 'sent') plus way. Kept in the
-- reservation (" a<µs>") for settle, which knows what stays charged.
-- Uses: B, resmark, resway
local r = redis.call('HGET', KEYS[12], ARGV[2])
local way = tonumber(ARGV[3] or '')
if not r or way == nil or way < 0 or not resmark(r, 'w') or resway(r) then return 0 end
redis.call('HSET', KEYS[12], ARGV[2], r .. ' a' .. B.fmt(math.floor(way)))
return 1
