-- admission delay: a ticket to register when it is due (admit registers
-- the due ones before it decides).
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the id, ARGV[3] the ticket
-- encoded, ARGV[4] when it is due (µs).
-- Reply: 1.
-- Uses: (KEYS and ARGV only)
redis.call('ZADD', KEYS[14], tonumber(ARGV[4]), ARGV[2] .. '\0' .. ARGV[3])
return 1
