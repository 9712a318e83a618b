-- admission cancel: a ticket leaves the order.
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the id, ARGV[3] optional
-- 'waiting': then a ticket admitted already (released, its task on its
-- way) is left alone.
-- Reply: 1 removed, 0 not there (or admitted, with 'waiting').
-- Uses: decode, refresh, ticketdel, ticketenc, unlink
local enc = ticketenc(ARGV[2])
if not enc then return 0 end
if ARGV[3] == 'waiting' and redis.call('ZSCORE', KEYS[10], ARGV[2]) then return 0 end
local t = decode(ARGV[2], enc)
unlink(t)
ticketdel(t.id)
redis.call('ZREM', KEYS[10], t.id)
refresh(t.class, t.tenant, true)
return 1
