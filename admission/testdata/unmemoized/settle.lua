-- admission settle: a call's usage replaces (or adds to) its charge and
-- its reservation ends.
-- KEYS: prelude.lua's.  ARGV[1] now µs, ARGV[2] the id, ARGV[3] policy:
-- refund (usage replaces the estimate), debt (usage beyond the estimate
-- is added) or estimate (the estimate stays); ARGV[4..] the model's
-- dimensions (B.load), their values the actual usage (-1 unknown).
-- Reply: 1 settled, 0 no reservation.
-- Uses: B, keystate, now, reservation
local r = redis.call('HGET', KEYS[12], ARGV[2])
if not r then return 0 end
local charged, key, _, ids = reservation(r)
if key ~= nil then -- else its key is gone: nothing to correct
  local st = B.load(keystate(key), ARGV, 3, now)
  charged = B.ondims(charged, ids, st)
  -- where the charge is (its admission, or its start): a window gives
  -- back in that slot, if it still counts
  local at = tonumber(redis.call('ZSCORE', KEYS[13], ARGV[2]) or '')
  -- a written call whose reply bounded its way (arrived): what stays
  -- charged at its write stops counting by its arrival (B.exact)
  local way = tonumber(string.match(r, ' a(%d+)') or '')
  for i = 1, st.n do
    if charged[i] ~= nil then
      -- an unknown actual (-1: usage not split into input and output)
      -- leaves the charge
      local delta = charged[i] - st.val[i]
      -- what stays charged at its write: the estimate, or less what a
      -- refund gave back there (usage beyond it is charged now, elsewhere)
      local kept = charged[i]
      if st.val[i] >= 0 and (ARGV[3] == 'refund' or (delta < 0 and ARGV[3] == 'debt')) then
        B.give(st, i, delta, at)
        if ARGV[3] == 'refund' then kept = math.min(charged[i], st.val[i]) end
      end
      if way ~= nil and at ~= nil then B.exact(st, i, at, kept, at + way) end
    end
  end
  B.save(st)
end
redis.call('HDEL', KEYS[12], ARGV[2])
redis.call('ZREM', KEYS[13], ARGV[2])
return 1
