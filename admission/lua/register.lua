-- admission register: a ticket joins the model's order.
-- KEYS: prelude.lua's.  ARGV[1] now µs ("": Redis TIME), ARGV[2] the
-- ticket's id, ARGV[3] the ticket encoded (ticket.go), ARGV[4] the wake
-- channel ("": none).
-- Reply: 1 registered, 0 it was registered already.
-- the wake names the ticket's class (the loops skip a batch one while
-- the model's head waits for tokens) and when it came (an attempt
-- that began later saw it)
-- Uses: B, now, register
local n, class = register(ARGV[2], ARGV[3])
if n == 1 and ARGV[4] ~= nil and ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], 't|' .. class .. '|' .. B.fmt(now)) end
return n
