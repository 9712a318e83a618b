-- admission register, the reference: each ticket registered as a call of
-- its own would (the unmemoized register reads Redis for every value),
-- one after the other.
-- KEYS: prelude.lua's.  ARGV[1] now µs ("": Redis TIME), ARGV[2] the
-- wake channel ("": none), then per ticket its id and the ticket
-- encoded (ticket.go).
-- Reply: per ticket, 1 registered, 0 it was registered already.
local out = {}
for i = 3, #ARGV - 1, 2 do
  local n, class = register(ARGV[i], ARGV[i + 1])
  out[#out + 1] = n
  if n == 1 and ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], 't|' .. class .. '|' .. B.fmt(now)) end
end
return out
