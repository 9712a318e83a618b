-- prq admission: the stored form of a ticket, shared by admission.lua and
-- the codec test (ticket_test.go runs decode on Redis against Go's encode).
--
-- A ticket is stored as "class|tenant|rank|tokens|enq_us|queue|prio"
-- and optionally "|output" (Go: encodeTicket/decodeTicket in ticket.go;
-- keep the three in step). rank orders a tenant's flow (PR sequence, then
-- the job's index); prio (>= 1) divides the ticket's cost in fair
-- queuing: the bump of a PR that is further along. output is the part of
-- tokens that is the call's output allowance, the rest its input; a
-- ticket without it charges all its tokens to each of the input and
-- output dimensions.
-- Uses: (nothing)
-- Defines: decode, stamp, rerank

local function split(s)
  local out = {}
  for part in string.gmatch(s, '([^|]*)|?') do out[#out + 1] = part end
  return out
end

local function decode(id, enc)
  local p = split(enc)
  local t = {id = id, class = p[1], tenant = p[2], rank = p[3], tokens = tonumber(p[4]),
    enq = tonumber(p[5]), queue = p[6], prio = tonumber(p[7]) or 1}
  local out = tonumber(p[8] or '')
  if out ~= nil and out > 0 and out <= t.tokens then
    t.input, t.output = t.tokens - out, out
  else
    t.input, t.output = t.tokens, t.tokens
  end
  return t
end

-- stamp returns enc with its enqueue time set to us (a ticket registered
-- with enq 0 waits from Redis's now).
local function stamp(enc, us)
  local p = split(enc)
  p[5] = us
  return table.concat(p, '|')
end

-- rerank returns enc with its rank set (chat's rank is its arrival
-- sequence, given at registration).
local function rerank(enc, rank)
  local p = split(enc)
  p[3] = rank
  return table.concat(p, '|')
end
