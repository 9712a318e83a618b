-- admission stats: what waits and what was admitted, for metrics.
-- KEYS: prelude.lua's.  ARGV[1] now µs.
-- Reply: {now, chat waiting, paid, trial and free waiting, released,
-- the stats hash (HGETALL), {tier|tenant, waiting, ...} (active flows,
-- at most 50 a tier)}.
-- Uses: B, HEADS, TIERS, now
local out = {B.fmt(now)}
out[#out + 1] = redis.call('ZCARD', KEYS[4])
for _, tier in ipairs(TIERS) do
  out[#out + 1] = redis.call('ZLEXCOUNT', KEYS[3], '[' .. tier .. '|', '[' .. tier .. '|\255')
end
out[#out + 1] = redis.call('ZCARD', KEYS[10])
out[#out + 1] = redis.call('HGETALL', KEYS[11])
-- backlog per tenant of each tier (active flows only, at most 50 each)
local tenants = {}
for _, tier in ipairs({'chat', 'paid', 'trial', 'free'}) do
  for _, tenant in ipairs(redis.call('ZRANGE', HEADS[tier], 0, 49)) do
    local prefix = tier .. '|' .. tenant .. '|'
    tenants[#tenants + 1] = tier .. '|' .. tenant
    tenants[#tenants + 1] = redis.call('ZLEXCOUNT', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255')
  end
end
out[#out + 1] = tenants
return out
