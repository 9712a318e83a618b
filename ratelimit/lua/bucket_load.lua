-- prq limiter library, part 2 of 4: B.load, which reads a limiter's
-- dimensions from the script's arguments and its state from Redis and
-- brings the state up to now. Needs bucket_slots.lua (before it).
-- Uses: B, credits, exactfield, fetch, readslots, recount, slotfield,
--   timefield
-- Defines: (nothing but B's functions)

-- B.load reads n dimensions from argv at base+1 (count) and then per
-- dimension its kind and values: 'b', limit, period_us, burst, value; or
-- 'w', limit, window_us, sub_us (0: none), sub_limit, slot_us, value,
-- margin_us; or 'a' (auto), limit, period_us, burst, value, window_us,
-- sub_us, sub_limit, slot_us, margin_us: a token bucket ('b') until
-- B.towindow has found the provider counting in a window (the state's
-- field auto is 'w'), then a window ('w'), in every process at once.
-- margin_us is the part of window_us (and sub_us) that is the caller's
-- measured margin, -1 when it is not measured: a window holds the
-- longest measured margin any process held in this and the last window
-- (fields ya, yc, yp), so a process whose calls find the provider sooner
-- does not let go of another's that took longer.
-- It brings the state up to now and returns it and the index of the last
-- argument it read. st.burst[i] is the most one call may ever take.
-- B.DIMARGS is how many arguments a dimension of each kind takes, its
-- kind included; B.dimsend the index of the last of n dimensions' at
-- base (as B.load returns it, without loading: a script that reads
-- arguments after them before it loads).
-- B.EXTRA names fields a caller keeps in the same hash beside the
-- state (set before B.load): B.load reads them with the state into
-- st.extra (false: absent), and B.save writes those it marks in
-- st.xdirty (a value of false deletes the field).
B.DIMARGS = {a = 10, w = 8, b = 5}
B.EXTRA = {}
function B.dimsend(argv, base)
  local b = base + 1
  for _ = 1, tonumber(argv[base + 1]) do
    b = b + (B.DIMARGS[string.sub(argv[b + 1] or '', 1, 1)] or 0)
  end
  return b
end
function B.load(key, argv, base, now)
  local st = {key = key, now = now, kind = {}, fid = {}, lim = {}, per = {}, burst = {}, val = {}, level = {},
    sub = {}, sublim = {}, slot = {}, sum = {}, subsum = {}, first = {}, subfirst = {}, oldest = {}, newest = {}, base = {}, learn = {}, margin = {},
    cache = {}, tcache = {}, dirty = {}, del = {}, xcache = {}, xstale = {}, cred = {}, scred = {}, credit = {}, subcredit = {}}
  local n = tonumber(argv[base + 1])
  st.n = n
  local b = base + 1
  for i = 1, n do
    -- a dimension's kind, then its stable id ('b2'): its state's fields
    -- are named by the id, so adding or removing another dimension
    -- leaves them in place
    local kind, fid = string.match(argv[b + 1] or '', '^(%a)(%d*)$')
    st.fid[i] = tonumber(fid) or i
    local v
    if kind == 'a' then
      if st.auto == nil then st.auto = redis.call('HGET', key, 'auto') or 'b' end
      if st.auto == 'w' then
        v = {'w', argv[b + 2], argv[b + 6], argv[b + 7], argv[b + 8], argv[b + 9], argv[b + 5], argv[b + 10]}
      else
        v = {'b', argv[b + 2], argv[b + 3], argv[b + 4], argv[b + 5]}
      end
      b = b + B.DIMARGS.a
    elseif kind == 'w' then
      v = {'w', argv[b + 2], argv[b + 3], argv[b + 4], argv[b + 5], argv[b + 6], argv[b + 7], argv[b + 8]}
      b = b + B.DIMARGS.w
    elseif kind == 'b' then
      v = {'b', argv[b + 2], argv[b + 3], argv[b + 4], argv[b + 5]}
      b = b + B.DIMARGS.b
    else
      error('bucket: unknown limiter kind ' .. tostring(kind))
    end
    kind = v[1]
    st.kind[i] = kind
    st.lim[i] = tonumber(v[2])
    st.per[i] = tonumber(v[3])
    if kind == 'w' then
      st.sub[i] = tonumber(v[4])
      st.sublim[i] = tonumber(v[5])
      st.slot[i] = tonumber(v[6])
      st.val[i] = tonumber(v[7])
      st.margin[i] = tonumber(v[8] or '') or -1
      st.burst[i] = st.lim[i]
      if st.sub[i] > 0 and st.sublim[i] < st.burst[i] then st.burst[i] = st.sublim[i] end
      st.cache[i], st.tcache[i], st.dirty[i], st.del[i] = {}, {}, {}, {}
      st.xcache[i], st.xstale[i], st.cred[i], st.scred[i] = {}, {}, {}, {}
      st.credit[i], st.subcredit[i] = 0, 0
    else
      st.burst[i] = tonumber(v[4])
      st.val[i] = tonumber(v[5])
    end
  end
  local fields = {'t'}
  for i = 1, n do
    if st.kind[i] == 'w' then
      for _, f in ipairs({'s', 'u', 'p', 'q', 'd', 'h', 'g', 'm', 'e'}) do fields[#fields + 1] = 'w' .. st.fid[i] .. f end
    else
      fields[#fields + 1] = 'l' .. st.fid[i]
    end
  end
  local nf = #fields
  for _, f in ipairs({'tv', 'ow', 'ya', 'yc', 'yp', 'x'}) do fields[#fields + 1] = f end
  for _, f in ipairs(B.EXTRA) do fields[#fields + 1] = f end
  local stored = redis.call('HMGET', key, unpack(fields))
  st.extra, st.xdirty = {}, {}
  for x, f in ipairs(B.EXTRA) do st.extra[f] = stored[nf + 6 + x] or false end
  st.last = tonumber(stored[1] or '') or now
  st.exists = stored[1] ~= false -- a state saved (t), not absent
  st.expiry = tonumber(stored[nf + 6] or '') -- B.save's TTL refresh
  -- the last save of a writer that knows no slot times (see above)
  local tv, t0 = tonumber(stored[nf + 1] or ''), tonumber(stored[1] or '')
  st.oldsave = tonumber(stored[nf + 2] or '')
  if t0 ~= nil and (tv == nil or t0 > tv) then st.oldsave = t0 end
  st.oldslot = {}
  -- the longest measured margin of this window and the last (epochs of
  -- the window's length): what every measured process holds
  local shared = -1
  for i = 1, n do
    if st.kind[i] == 'w' and st.margin[i] >= 0 and st.margins == nil then
      local w = math.max(st.per[i] - st.margin[i], 1)
      local e = math.floor(now / w)
      local ya, yc, yp = tonumber(stored[nf + 3] or ''), tonumber(stored[nf + 4] or '') or 0, tonumber(stored[nf + 5] or '') or 0
      if ya ~= e then
        if ya == e - 1 then yp, yc = yc, 0 else yp, yc = 0, 0 end
      end
      local own = 0
      for j = 1, n do
        if st.kind[j] == 'w' and st.margin[j] > own then own = st.margin[j] end
      end
      yc = math.max(yc, own)
      st.margins = {e, yc, yp}
      shared = math.max(yc, yp)
    end
  end
  local elapsed = now - st.last
  if elapsed < 0 then elapsed = 0 end
  -- first every dimension's stored fields, and the slots the walks
  -- below will read (those leaving the sub-window and the window, those
  -- a longer span counts again, those credited by their calls' arrival,
  -- and the current one, which a charge takes): one read for them all
  local k, P, want = 2, {}, {}
  for i = 1, n do
    if st.kind[i] == 'w' then
      local g = st.slot[i]
      -- learned margin: a 429 while the window admitted means the
      -- provider counts calls later than we do; hold admissions longer
      local oldg0 = tonumber(stored[k + 6] or '')
      st.base[i] = st.per[i]
      st.learn[i] = tonumber(stored[k + 7] or '') or 0
      if oldg0 ~= g then st.learn[i] = 0 end
      local longer = 0
      if st.margin[i] >= 0 and shared > st.margin[i] then longer = shared - st.margin[i] end
      st.per[i] = st.per[i] + longer + st.learn[i]
      if st.sub[i] > 0 then st.sub[i] = st.sub[i] + longer + st.learn[i] end
      local lo = math.floor((now - st.per[i]) / g)
      local los = lo
      if st.sub[i] > 0 then los = math.floor((now - st.sub[i]) / g) end
      local lod = math.floor((now - 2 * st.per[i]) / g)
      local s, u, p, q, d, h = stored[k], stored[k + 1], stored[k + 2], stored[k + 3], stored[k + 4], stored[k + 5]
      local oldg = oldg0
      -- time fields are dropped up to slot e (below: older writers')
      P[i] = {lo = lo, los = los, lod = lod, e = tonumber(stored[k + 8] or ''), fresh = false}
      k = k + 9
      st.oldslot[i] = -1
      if st.oldsave ~= nil then st.oldslot[i] = math.floor(st.oldsave / g) end
      if p and oldg ~= g then
        -- the window was reconfigured: its slots mean other times; start
        -- afresh (as a new bucket starts full) and drop the old slots
        local from, to = tonumber(d) or 0, tonumber(h) or -1
        for j = from, math.min(to, from + 30000) do
          st.del[i][#st.del[i] + 1] = slotfield(st.fid[i], j)
          st.del[i][#st.del[i] + 1] = timefield(st.fid[i], j)
          st.del[i][#st.del[i] + 1] = exactfield(st.fid[i], j)
        end
        p = false
      end
      if p == false or p == nil then
        P[i].fresh = true
        st.sum[i], st.subsum[i], st.first[i], st.subfirst[i], st.oldest[i], st.newest[i] = 0, 0, lo, los, lod, lo - 1
      else
        st.sum[i], st.subsum[i] = tonumber(s) or 0, tonumber(u) or 0
        st.first[i], st.subfirst[i], st.oldest[i], st.newest[i] = tonumber(p), tonumber(q) or los, tonumber(d) or lod, tonumber(h) or lo - 1
        local hi, off = st.newest[i], st.per[i] - st.base[i] - st.learn[i] + st.margin[i]
        local spans = {{st.first[i], lo, st.per[i]}}
        if st.sub[i] > 0 then spans[2] = {st.subfirst[i], los, st.sub[i]} end
        for _, sp in ipairs(spans) do
          local from, to = sp[1], sp[2]
          want[#want + 1] = {i, from, math.min(to - 1, hi)}
          want[#want + 1] = {i, math.max(to, st.oldest[i]), math.min(from - 1, hi)}
          want[#want + 1] = {i, to, math.min(to, hi)}
          if st.margin[i] >= 0 then want[#want + 1] = {i, to, math.min(hi, math.floor((now - sp[3] + off) / g))} end
        end
      end
      want[#want + 1] = {i, math.floor(now / g), math.floor(now / g)}
    else
      local cap = st.burst[i] * st.per[i]
      local l = tonumber(stored[k] or '') or cap
      k = k + 1
      l = l + elapsed * st.lim[i]
      if l > cap then l = cap end
      st.level[i] = l
    end
  end
  fetch(st, want)
  for i = 1, n do
    if st.kind[i] == 'w' then
      local lo, los, lod, e = P[i].lo, P[i].los, P[i].lod, P[i].e
      if not P[i].fresh then
        -- slots leaving the sub-window, then the window, then storage;
        -- none past the newest written (the walks stay bounded)
        if st.sub[i] > 0 and st.subfirst[i] < los then
          local top = math.min(los - 1, st.newest[i])
          if top >= st.subfirst[i] then
            local c = readslots(st, i, st.subfirst[i], top)
            for j = st.subfirst[i], top do st.subsum[i] = st.subsum[i] - c[j] end
          end
          st.subfirst[i] = los
        end
        if st.first[i] < lo then
          local top = math.min(lo - 1, st.newest[i])
          if top >= st.first[i] then
            local c = readslots(st, i, st.first[i], top)
            for j = st.first[i], top do st.sum[i] = st.sum[i] - c[j] end
          end
          st.first[i] = lo
        end
        -- a longer span than the last decision's (its margin measured
        -- longer, in this process or another, or learned): slots that
        -- stopped counting count again, as long as they are kept; and
        -- the oldest slot still counting stops at its latest charge's
        -- time and the span, before its end's. The window, then the
        -- sub-window.
        recount(st, i, lo, now - st.per[i], st.first, st.sum)
        if st.sub[i] > 0 then recount(st, i, los, now - st.sub[i], st.subfirst, st.subsum) end
        -- an older writer dropped slots below d and left their times
        if e ~= nil and e < st.oldest[i] then
          for j = e, math.min(st.oldest[i] - 1, e + 30000) do
            st.del[i][#st.del[i] + 1] = timefield(st.fid[i], j)
            st.del[i][#st.del[i] + 1] = exactfield(st.fid[i], j)
          end
        end
        if st.oldest[i] < lod then
          for j = st.oldest[i], math.min(lod - 1, st.newest[i]) do
            st.del[i][#st.del[i] + 1] = slotfield(st.fid[i], j)
            st.del[i][#st.del[i] + 1] = timefield(st.fid[i], j)
            st.del[i][#st.del[i] + 1] = exactfield(st.fid[i], j)
          end
          st.oldest[i] = lod
        end
      end
      -- slots whose calls all replied stop counting by their arrival
      if st.margin[i] >= 0 then
        st.credit[i] = credits(st, i, st.first[i], st.per[i], st.cred)
        if st.sub[i] > 0 then st.subcredit[i] = credits(st, i, st.subfirst[i], st.sub[i], st.scred) end
      end
      if st.sub[i] == 0 then st.subfirst[i] = st.first[i] end
      st.level[i] = st.lim[i] - (st.sum[i] - st.credit[i])
      if st.sub[i] > 0 and st.sublim[i] - (st.subsum[i] - st.subcredit[i]) < st.level[i] then st.level[i] = st.sublim[i] - (st.subsum[i] - st.subcredit[i]) end
    end
  end
  return st, b
end

-- A reservation names the dimensions its costs were charged to by their
-- ids, in order: the mark "d<id>,<id>..." (B.dimsmark writes it,
-- B.readdims reads it). B.ondims maps the costs onto a loaded state's
-- dimensions by those ids, so a limit configured or dropped while the
-- reservation is open moves no charge to another dimension: one
-- configured since gets nil (nothing was charged to it), one dropped
-- since is left out. Without ids (a reservation written before they
-- were), by position.
function B.dimsmark(st) return 'd' .. table.concat(st.fid, ',') end

function B.readdims(mark)
  local ids = {}
  for id in string.gmatch(string.sub(mark, 2), '%d+') do ids[#ids + 1] = tonumber(id) end
  return ids
end

function B.ondims(costs, ids, st)
  if ids == nil then return costs end
  local byid = {}
  for x, id in ipairs(ids) do byid[id] = costs[x] end
  local out = {}
  for j = 1, st.n do out[j] = byid[st.fid[j]] end
  return out
end
