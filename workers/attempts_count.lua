-- attempts count: the codec of a job's count record (a string key,
-- Attempts.countKey), shared by the attempts scripts; retry.go's
-- countRecord is Go's, and testdata/attempts_count.json the golden
-- cases both are tested against (TestCountGolden).
-- A record is space-separated name=value fields:
--   n=<runs so far>  first=<the first run's, or the rebase's, unix ms>
--   rebased=<1 if the budget was started again at first, else 0>
-- e.g. "n=1 first=1800000000000 rebased=0". A field missing reads as
-- n 0, no first, not rebased; a field of another name is skipped; an n
-- or a first that is no integer is an error (the script fails).

-- countdecode reads a stored record (false: none) as {n, first (a
-- string, or false), rebased (1 or 0)}.
local function countdecode(s)
  local c = {n = 0, first = false, rebased = 0}
  if not s then return c end
  for f in string.gmatch(s, '%S+') do
    local name, v = string.match(f, '^([^=]*)=?(.*)$')
    if (name == 'n' or name == 'first') and not string.match(v, '^%-?%d+$') then
      error('attempts: unreadable count record "' .. s .. '"')
    end
    if name == 'n' then
      c.n = tonumber(v)
    elseif name == 'first' then
      c.first = v
    elseif name == 'rebased' then
      c.rebased = v == '1' and 1 or 0
    end
  end
  return c
end

-- countencode writes c as stored (a record with no first has none).
local function countencode(c)
  local s = 'n=' .. c.n
  if c.first then s = s .. ' first=' .. c.first end
  return s .. ' rebased=' .. c.rebased
end
