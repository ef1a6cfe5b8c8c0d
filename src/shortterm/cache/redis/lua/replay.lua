-- ARGV: P, to, from, now, prune horizon, entry count; per entry: seq, 's' for a settings
-- change ('' else), target count T, T targets, eviction count E, E x (how, key): 'z' or 's'
-- an index whose records go, 'r' one record (its member), 'w' every record of the group when
-- the mark is below `key` (a prune deleted entries the group never had applied).
-- Brings the group's mark up to `to`, atomically with what that promises: every journaled
-- forget above the mark (the entries given are those in (`from`, `to`]) has its tombstones
-- recorded and the records it names evicted here (those written wholly by writes that began
-- after it are new data, and stay: see `predates`). Returns the mark: unchanged when it is at
-- or past `to`; 'short' when it is below `from` (the entries do not reach down to it); ''
-- when the group has no mark (it must be reset first).
local to, from = tonumber(ARGV[2]), tonumber(ARGV[3])
local raw = redis.call('GET', P .. 'fm')
local fm = tonumber(raw or '')
if not fm then return '' end
if fm >= to then return raw end  -- as stored: a Lua number prints large ones as floats
if fm < from then return 'short' end
local i = 7
for _ = 1, tonumber(ARGV[6]) do
  local seq, settings, nt = ARGV[i], ARGV[i + 1] == 's', tonumber(ARGV[i + 2])
  local later = tonumber(seq) > fm
  local targets = {}
  for t = 1, nt do table.insert(targets, ARGV[i + 2 + t]) end
  i = i + 3 + nt
  local ne = tonumber(ARGV[i])
  if later then record(seq, targets, ARGV[4], ARGV[5], settings) end
  for e = 1, ne do
    local how, key = ARGV[i + 2 * e - 1], ARGV[i + 2 * e]
    if later then
      local before = tonumber(seq)
      if how == 'r' then
        if predates(key, before) then remove(key) end
      elseif how == 'w' then
        if fm < tonumber(key) then
          for _, member in ipairs(redis.call('ZRANGE', P .. 'x', 0, -1)) do remove(member) end
        end
      else remove_listed(key, how, before) end
    end
  end
  i = i + 1 + 2 * ne
end
redis.call('SET', P .. 'fm', ARGV[2])
return ARGV[2]
