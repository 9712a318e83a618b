-- Tenant quota with the output-cap technique: reserve exact input tokens
-- plus an output cap equal to what is left, atomically, so concurrent
-- calls of one tenant can never overshoot together.
--
-- reserve: KEYS[1] used counter of the window   KEYS[2] reservation
--   ARGV: op, now_us|"", window_start_us, window_end_us, limit, input,
--         requested_max, min_output, reservation_ttl_ms[, input_price,
--         output_price] (per token in the quota's unit; default 1 and 1)
--   -> {1, cap, remaining_after, now, window_start} admitted
--      {2, cap, 0, now, window_start} duplicate: the job's earlier reservation
--      {0, remaining, 0, now}         refused: nothing reserved
--      {-3, 0, 0, now}                now is outside the window given
-- settle:  KEYS[1] used counter of the reservation's window, KEYS[2] as
--   above; ARGV: op, now, actual
--   -> {1, used_after} or {0, 0} when there was no reservation
-- peek:    KEYS[1]; ARGV: op, now, window_start_us, window_end_us
local function fmt(x) return string.format('%.0f', x) end
local now
if ARGV[2] ~= '' then now = tonumber(ARGV[2]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local op = ARGV[1]

if op == 'reserve' then
  local ws, we = tonumber(ARGV[3]), tonumber(ARGV[4])
  if now < ws or now >= we then return {-3, 0, 0, fmt(now)} end
  local r = redis.call('GET', KEYS[2])
  if r then
    local _, cap, rws, tokcap = string.match(r, '^(%d+) (%d+) (%d+) ?(%d*)')
    if tokcap ~= nil and tokcap ~= '' then cap = tokcap end
    return {2, tonumber(cap), 0, fmt(now), rws}
  end
  local limit, input, want, minout = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  -- prices per input and output token in the quota's unit (1 and 1:
  -- a quota in tokens; nano-dollars for a quota in dollars)
  local pin, pout = tonumber(ARGV[10] or '1') or 1, tonumber(ARGV[11] or '1') or 1
  local used = tonumber(redis.call('GET', KEYS[1]) or '0')
  local remaining = limit - used
  local inamt = input * pin
  if remaining < inamt + minout * pout then return {0, fmt(math.max(remaining, 0)), 0, fmt(now)} end
  local cap = want
  if pout > 0 then cap = math.min(want, math.floor((remaining - inamt) / pout)) end
  local amount = inamt + cap * pout
  redis.call('INCRBY', KEYS[1], amount)
  -- keep the counter a day past its window, for display and late settles
  redis.call('PEXPIREAT', KEYS[1], math.floor(we / 1000) + 86400000)
  -- the reservation: its input and output amounts, its window, its cap in tokens
  redis.call('SET', KEYS[2], fmt(inamt) .. ' ' .. fmt(cap * pout) .. ' ' .. fmt(ws) .. ' ' .. fmt(cap), 'PX', tonumber(ARGV[9]))
  return {1, fmt(cap), fmt(remaining - amount), fmt(now), fmt(ws)}
elseif op == 'settle' then
  local r = redis.call('GET', KEYS[2])
  if not r then return {0, 0} end
  local input, cap = string.match(r, '(%d+) (%d+) %d+')
  local delta = tonumber(ARGV[3]) - (tonumber(input) + tonumber(cap))
  redis.call('DEL', KEYS[2])
  if redis.call('EXISTS', KEYS[1]) == 0 then return {1, 0} end
  local used = redis.call('INCRBY', KEYS[1], delta)
  return {1, used}
elseif op == 'peek' then
  return {fmt(tonumber(redis.call('GET', KEYS[1]) or '0')), fmt(now)}
end
return redis.error_reply('quota: unknown op ' .. tostring(op))
