-- prq admission, the prelude every operation's script starts with
-- (after ratelimit's library, which defines B, and ticket.lua). Tickets
-- wait in one global order per model; admit takes, in that order, as
-- many as the model's bucket admits (at most a budget), charging the
-- bucket in the same atomic step.
--
-- Layout. Each operation is its own script (register.lua, cancel.lua,
-- delay.lua, start.lua for started and calling, sent.lua, settle.lua,
-- expire.lua, admit.lua after admit_pick.lua and admit_backfill.lua,
-- position.lua, stats.lua): Go (scripts.go) concatenates ratelimit's
-- library, ticket.lua, this file, reservation.lua, memo.lua,
-- memo_hash.lua, order.lua, then the operation's files, so one EVALSHA decides and charges
-- atomically. Every file's header names the locals it takes from the
-- files before it ("Uses:") and, when others follow it, the ones it
-- gives them ("Defines:"); TestLuaLayout checks both against the code.
-- Every operation takes the same KEYS (below) and ARGV[1], the time in
-- µs ("" for Redis TIME: now); its header says the rest of its ARGV and
-- its reply.
--
-- KEYS (one hash tag, the model bucket's). The one table of their order
-- is keyTable in keys.go; TestLuaKeysMatchTable checks this list
-- against it, name by name:
--  KEYS[1] state          the model's (and key 0's) bucket state
--  KEYS[2] tickets        hash: id -> encoded ticket (ticket.lua)
--  KEYS[3] lex            zset of flows: "class|tenant|rank|id", score 0;
--                         chat's rank is its arrival sequence
--  KEYS[4] chat           zset: chat id by arrival sequence
--  KEYS[5] heads:paid     flow heads of paid: tenant by finish tag
--  KEYS[6] heads:trial    flow heads of trial
--  KEYS[7] heads:free     flow heads of free
--  KEYS[8] vt             hash: virtual times, the chat sequence, backfill's due
--  KEYS[9] age            zset: id by enqueue µs
--  KEYS[10] released      zset: admitted id by its release deadline µs
--  KEYS[11] stats         hash of counters
--  KEYS[12] res           hash: id -> reservation (reservation.lua)
--  KEYS[13] resage        zset: id by its charge's time µs, for an older
--                         prq's reservations (no " @<µs>": resat)
--  KEYS[14] delayed       zset: "id NUL encoded ticket" by due µs
--  KEYS[15] paused        string: why admissions are paused
--  KEYS[16] waits         list: recent admission waits "class:µs", newest first
--  KEYS[17] heads:chat    flow heads of chat: tenant by finish tag
--  KEYS[18] bage          zset: batch id by enqueue µs (the aging bound's order)
--  KEYS[19 + 2i], KEYS[20 + 2i]: the bucket state of the model's API key
--                         i (from 0; key 0's is KEYS[1]) and why it is
--                         paused; only for a model with several keys
--
-- Several API keys: each key has its own bucket state with the model's
-- limits. A ticket is charged to one key: of the keys not paused whose
-- bucket admits it now, the one with the most room left (so the load
-- spreads evenly). Its reservation remembers the key ("k<i>"), so
-- start, settle and refund go to that key's bucket; the reply names it.
--
-- Order of one admission: chat against batch by start-time fair queuing
-- of the two classes (weights cap and 1 - cap over tokens, so chat takes
-- at most its cap of what is admitted while batch waits); inside chat,
-- start-time fair queuing across tenants; inside batch, the oldest ticket
-- past the aging bound, else the weighted tiers. Uncapped (cap 1), chat
-- goes first unless a batch ticket is past the aging bound.
--
-- Uses: B
-- Defines: TIERS, HEADS, now, NKEYS, keystate, keypaused

local TIERS = {'paid', 'trial', 'free'}
local HEADS = {paid = KEYS[5], trial = KEYS[6], free = KEYS[7], chat = KEYS[17]}

local now = B.clock(ARGV[1])

-- the model's API keys (one when the caller passes no key pairs)
local NKEYS = math.max(math.floor((#KEYS - 18) / 2), 1)
local function keystate(i)
  if #KEYS >= 19 then return KEYS[19 + 2 * i] end
  return KEYS[1]
end
local function keypaused(i)
  if #KEYS >= 20 then return KEYS[20 + 2 * i] end
  return nil
end
