-- prq admission: the memo of one script call, its hashes (read after
-- memo.lua, before order.lua): the virtual times and the stats hashes,
-- read in one command each where the caller knows the fields, and, with
-- DEFER.on, written once each by flushorder(), which also flushes
-- memo.lua's deferred removals (zflush).
-- Uses: DEFER, callchunks, zflush
-- Defines: vt, vtload, vtset, vtdel, vtincr, statload, statget, statadd,
--   statset, flushorder

-- the virtual times hash (numbers; 0 for a field not there), VTR[f]
-- whether Redis has f (nil: not known) and, deferred, the fields to
-- write (VTW[f]: true set, false delete) in the order first written.
local VT, VTR, VTW, VTO = {}, {}, {}, {}
local function vtread(field, raw)
  VT[field] = tonumber(raw or '0') or 0
  VTR[field] = raw ~= false and raw ~= nil
end
local function vt(field)
  if VT[field] == nil then vtread(field, redis.call('HGET', KEYS[8], field)) end
  return VT[field]
end
-- vtload reads fields in one command.
local function vtload(fields)
  local want = {}
  for _, f in ipairs(fields) do
    if VT[f] == nil then want[#want + 1] = f end
  end
  if #want == 0 then return end
  local v = redis.call('HMGET', KEYS[8], unpack(want))
  for i, f in ipairs(want) do vtread(f, v[i]) end
end
local function vtpend(field, set)
  if VTW[field] == nil then VTO[#VTO + 1] = field end
  VTW[field] = set
end
local function vtset(field, v)
  VT[field] = v
  if DEFER.on then
    vtpend(field, true)
  else
    redis.call('HSET', KEYS[8], field, v)
    VTR[field] = true
  end
end
local function vtdel(field)
  VT[field] = 0
  if DEFER.on then
    vtpend(field, false)
  elseif VTR[field] ~= false then
    redis.call('HDEL', KEYS[8], field)
    VTR[field] = false
  end
end
local function vtincr(field, n)
  if DEFER.on then
    vtset(field, vt(field) + n)
  else
    VT[field] = redis.call('HINCRBY', KEYS[8], field, n)
    VTR[field] = true
  end
end

-- the stats hash: the fields read (SV[f]: the stored string, false:
-- none) and, deferred, the sums to add (SA) and the values to set (SS),
-- in the order first written (SO): admit reads what it needs in one
-- command and writes in one.
local SV, SA, SS, SO = {}, {}, {}, {}
-- statload reads fields in one command.
local function statload(fields)
  local want = {}
  for _, f in ipairs(fields) do
    if SV[f] == nil then want[#want + 1] = f end
  end
  if #want == 0 then return end
  local v = redis.call('HMGET', KEYS[11], unpack(want))
  for i, f in ipairs(want) do SV[f] = v[i] or false end
end
-- statget is a field's value, what is deferred included.
local function statget(field)
  local v
  if SS[field] ~= nil then v = SS[field] else
    statload({field})
    v = SV[field] or nil
  end
  if SA[field] ~= nil then v = (tonumber(v or '0') or 0) + SA[field] end
  return v
end
local function statpend(field)
  if SA[field] == nil and SS[field] == nil then SO[#SO + 1] = field end
end
local function statadd(field, n)
  if not DEFER.on then
    redis.call('HINCRBY', KEYS[11], field, n)
    SV[field] = nil
    return
  end
  statpend(field)
  SA[field] = (SA[field] or 0) + n
end
local function statset(field, v)
  if not DEFER.on then
    redis.call('HSET', KEYS[11], field, v)
    SV[field] = v
    return
  end
  statpend(field)
  SS[field], SA[field] = v, nil
end

-- flushorder writes what DEFER held back.
local function flushorder()
  zflush()
  local set, del = {}, {}
  for _, f in ipairs(VTO) do
    if VTW[f] then
      set[#set + 1] = f
      set[#set + 1] = VT[f]
    elseif VTR[f] ~= false then
      del[#del + 1] = f
    end
  end
  if #del > 0 then callchunks('HDEL', KEYS[8], del) end
  if #set > 0 then callchunks('HSET', KEYS[8], set) end
  for _, f in ipairs(VTO) do VTR[f] = VTW[f] end
  VTW, VTO = {}, {}
  -- a sum's read (if not read before) and write, as HINCRBY would
  -- (integers stay integers)
  local need, args = {}, {}
  for _, f in ipairs(SO) do
    if SA[f] ~= nil and SS[f] == nil then need[#need + 1] = f end
  end
  statload(need)
  for _, f in ipairs(SO) do
    local v = SS[f]
    if SA[f] ~= nil then v = (tonumber(v or SV[f] or '0') or 0) + SA[f] end
    SV[f] = v
    args[#args + 1] = f
    args[#args + 1] = v
  end
  callchunks('HSET', KEYS[11], args)
  SA, SS, SO = {}, {}, {}
end
