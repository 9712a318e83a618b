-- admission register: tickets join the model's order, in the order
-- given, as one call each a µs apart would add them (one script call: the reads of
-- the flows' heads and virtual times, the writes of each key and the
-- wake are paid once).
-- KEYS: prelude.lua's.  ARGV[1] now µs ("": Redis TIME), ARGV[2] the
-- wake channel ("": none), then per ticket its id and the ticket
-- encoded (ticket.go).
-- Reply: per ticket, 1 registered, 0 it was registered already.
-- the wake names a class of the tickets (the loops skip a batch one
-- while the model's head waits for tokens) and when they came (an
-- attempt that began later saw them): once per batch class, once per
-- chat (the loops count chats heard)
-- Uses: ADDS, DEFER, HEADS, B, decode, flushorder, now, register,
--   ticketload, vtload, zfirst, zscore
DEFER.on, ADDS.on = true, true
local ids, want, seen = {}, {}, {}
local function need(f)
  if not seen[f] then seen[f] = true; want[#want + 1] = f end
end
-- what the registrations read, in one command each: the tickets (when
-- three or more: fewer cost an HSETNX each), the virtual times
for i = 3, #ARGV - 1, 2 do
  ids[#ids + 1] = ARGV[i]
  local t = decode(ARGV[i], ARGV[i + 1])
  if t.class == 'chat' then need('seq') elseif HEADS[t.class] and zfirst(HEADS[t.class]) == nil then
    need('t:' .. t.class)
    need('V')
  end
  if HEADS[t.class] and not zscore(HEADS[t.class], t.tenant) then
    need('f:' .. t.class .. ':' .. t.tenant)
    need('V:' .. t.class)
  end
end
if #ids >= 3 then ticketload(ids) end
vtload(want)
local out, wakes = {}, {}
-- each ticket of the batch comes a µs after the one before it, as one
-- call each would stamp them: the aging order keeps the order given
local t0 = now
for i = 3, #ARGV - 1, 2 do
  now = t0 + (i - 3) / 2
  local n, class = register(ARGV[i], ARGV[i + 1])
  out[#out + 1] = n
  if n == 1 and (class == 'chat' or not wakes[class]) then
    wakes[class] = true
    wakes[#wakes + 1] = class
  end
end
now = t0
flushorder()
if ARGV[2] ~= '' then
  for _, class in ipairs(wakes) do redis.call('PUBLISH', ARGV[2], 't|' .. class .. '|' .. B.fmt(now)) end
end
return out
