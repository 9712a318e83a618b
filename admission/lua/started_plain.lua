-- admission started, for a model whose limiter keeps no window (a token
-- bucket): the released task reached a handler, and only that is
-- recorded; start.lua does it for a window, which also moves the
-- charge. A script of its own (not on the prelude): it needs no clock
-- and no bucket.
-- KEYS[1] the model's released set (prelude.lua's KEYS[10])
-- KEYS[2] the model's tickets (prelude.lua's KEYS[2])
-- ARGV[1] the task's id
-- Reply: 0
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 0
