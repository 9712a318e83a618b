-- prq token bucket library: a multi-dimensional token bucket decided
-- all-or-nothing. Shared by ratelimit's own script and by scripts that
-- must charge a bucket in the same atomic step (the admission scheduler).
--
-- Levels are stored scaled by the dimension's period in microseconds
-- (level = tokens * period_us), so refill (elapsed_us * limit) is exact
-- integer arithmetic in Lua's doubles (exact below 2^53). Numbers are
-- written with %.0f: tostring keeps only 14 significant digits.

local B = {}

function B.fmt(x) return string.format('%.0f', x) end

-- B.clock returns the time in µs: the override when given, else Redis TIME.
function B.clock(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- B.load reads n dimensions from argv at base+1 (count) and then four
-- values each (limit, period_us, burst, value) and refills the state.
-- It returns the state and the index of the last argument it read.
function B.load(key, argv, base, now)
  local st = {key = key, now = now, lim = {}, per = {}, burst = {}, val = {}, level = {}}
  local n = tonumber(argv[base + 1])
  st.n = n
  for i = 1, n do
    local b = base + 1 + (i - 1) * 4
    st.lim[i] = tonumber(argv[b + 1])
    st.per[i] = tonumber(argv[b + 2])
    st.burst[i] = tonumber(argv[b + 3])
    st.val[i] = tonumber(argv[b + 4])
  end
  local fields = {'t'}
  for i = 1, n do fields[i + 1] = 'l' .. i end
  local stored = redis.call('HMGET', key, unpack(fields))
  st.last = tonumber(stored[1] or '') or now
  local elapsed = now - st.last
  if elapsed < 0 then elapsed = 0 end
  for i = 1, n do
    local cap = st.burst[i] * st.per[i]
    local l = tonumber(stored[i + 1] or '') or cap
    l = l + elapsed * st.lim[i]
    if l > cap then l = cap end
    st.level[i] = l
  end
  return st, base + 1 + n * 4
end

-- B.wait returns the µs until costs (plus an amount to leave untouched,
-- keep[i], which may be nil) fit, 0 when they fit now; or a negative
-- error code: -1 cost above burst, -2 negative cost, with the dimension.
function B.wait(st, costs, keep)
  local wait = 0
  for i = 1, st.n do
    local c = costs[i]
    if c < 0 then return -2, i end
    if c > st.burst[i] then return -1, i end
    local k = 0
    if keep ~= nil and keep[i] ~= nil then k = keep[i] end
    local need = (c + k) * st.per[i]
    if st.level[i] < need then
      local w = math.ceil((need - st.level[i]) / st.lim[i])
      if w > wait then wait = w end
    end
  end
  return wait, 0
end

function B.take(st, costs)
  for i = 1, st.n do st.level[i] = st.level[i] - costs[i] * st.per[i] end
end

function B.give(st, i, amount)
  st.level[i] = st.level[i] + amount * st.per[i]
  local cap = st.burst[i] * st.per[i]
  if st.level[i] > cap then st.level[i] = cap end
end

function B.save(st)
  local args = {'t', B.fmt(math.max(st.now, st.last))}
  local maxper = 0
  for i = 1, st.n do
    args[#args + 1] = 'l' .. i
    args[#args + 1] = B.fmt(st.level[i])
    if st.per[i] > maxper then maxper = st.per[i] end
  end
  redis.call('HSET', st.key, unpack(args))
  -- an idle bucket refills to full; keep it two periods, then let it go
  redis.call('PEXPIRE', st.key, math.floor(maxper / 1000) * 2 + 60000)
end

-- B.available returns the whole units available per dimension.
function B.available(st)
  local out = {}
  for i = 1, st.n do out[i] = math.floor(st.level[i] / st.per[i]) end
  return out
end
