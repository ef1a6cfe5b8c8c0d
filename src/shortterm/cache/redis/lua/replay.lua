-- ARGV: P, to, from, now, prune horizon, budget (microseconds), 'last' when `to` ends the
-- replay ('' else), the newest settings change among the entries ('' none), the tombstones
-- (JSON: [[target, seq], ...], each target with its newest forget among the entries), the
-- evictions (JSON: [[seq, [how, name], ...], ...], the entries that evict something in this
-- group, in journal order; `name` follows P): 'z' or 's' an index whose records go, 'r' one
-- record (its member), 'w' every record of the group when the group's mark was below `name`
-- where its replay began (a prune deleted entries the group never applied). Sequences are
-- strings: a Lua number prints large ones as floats.
-- One step of a replay (see repair.py): the entries are the forgets journaled in (`from`,
-- `to`], and the step moves the group's mark up through them, atomically with what that
-- promises: every forget up to the mark has its tombstones recorded and the records it names
-- evicted here (those written wholly by writes that began after it are new data, and stay:
-- see `predates`). The tombstones of all the entries go first, as a forget's go before its
-- evictions; the evictions then run until the step has taken `budget`, and the mark stops
-- below the first entry not wholly evicted (called again, the step goes on from there).
-- Returns the mark: `to` when done, lower when the budget ran out, unchanged when it is at or
-- past `to`; 'short' when it is below `from` (the entries do not reach down to it); '' when
-- the group has no mark (it must be reset first).
local to, from = tonumber(ARGV[2]), tonumber(ARGV[3])
local raw = redis.call('GET', P .. 'fm')
local fm = tonumber(raw or '')
if not fm then return '' end
if fm >= to then return raw end
if fm < from then return 'short' end

local started = redis.call('TIME')
local budget = tonumber(ARGV[6])
local function spent()
  local t = redis.call('TIME')
  return (t[1] - started[1]) * 1000000 + (t[2] - started[2]) >= budget
end

-- Where this group's replay began, kept until it ends: a prune is checked against it, not
-- against a mark that earlier steps moved past what the prune deleted.
local origin = tonumber(redis.call('GET', P .. 'fo') or '')
if not origin then
  origin = fm
  redis.call('SET', P .. 'fo', raw)
end

if ARGV[8] ~= '' and tonumber(ARGV[8]) > fm
    and tonumber(ARGV[8]) > tonumber(redis.call('GET', P .. 'sv') or '0') then
  redis.call('SET', P .. 'sv', ARGV[8])
end

-- The tombstones, those after the mark: each target keeps its newest forget ('tb'), listed
-- by time for pruning ('tl'), and the newest one recorded is 'th'.
local names, seqs = {}, {}
for _, pair in ipairs(cjson.decode(ARGV[9])) do
  if tonumber(pair[2]) > fm then
    table.insert(names, pair[1])
    table.insert(seqs, pair[2])
  end
end
local newest, newest_s = tonumber(redis.call('GET', P .. 'th') or '0'), nil
for first = 1, #names, 500 do  -- a slice at a time: a Lua call takes so many arguments
  local upto = math.min(first + 499, #names)
  local cur = redis.call('HMGET', P .. 'tb', unpack(names, first, upto))
  local set, dated = {}, {}
  for k = first, upto do
    local seq = tonumber(seqs[k])
    local had = cur[k - first + 1]
    if not had or tonumber(had) < seq then  -- else listed when it was set
      table.insert(set, names[k])
      table.insert(set, seqs[k])
      table.insert(dated, ARGV[4])
      table.insert(dated, seqs[k] .. ' ' .. names[k])
    end
    if seq > newest then newest, newest_s = seq, seqs[k] end
  end
  if #set > 0 then
    redis.call('HSET', P .. 'tb', unpack(set))
    redis.call('ZADD', P .. 'tl', unpack(dated))
  end
end
if newest_s then redis.call('SET', P .. 'th', newest_s) end
local old = redis.call('ZRANGEBYSCORE', P .. 'tl', '-inf', '(' .. ARGV[5], 'LIMIT', 0, 1000)
for _, m in ipairs(old) do
  local sp = string.find(m, ' ', 1, true)
  local t = string.sub(m, sp + 1)
  if redis.call('HGET', P .. 'tb', t) == string.sub(m, 1, sp - 1) then
    redis.call('HDEL', P .. 'tb', t)
  end
  redis.call('ZREM', P .. 'tl', m)
end

-- The evictions. Each removal is checked against the budget once done, so a step always
-- moves on; an index's records kept as newer than the forget are looked at again by the next
-- step (an index lists one channel's or one user's scopes of the group: a few).
local cut = false
local function listed(index, how, before)
  local members
  if how == 'z' then members = redis.call('ZRANGE', index, 0, -1)
  else members = redis.call('SMEMBERS', index) end
  if #members == 0 then return end
  local kept = false
  for _, member in ipairs(members) do
    if predates(member, before) then
      remove(member)
      if spent() then cut = true return end
    else kept = true end
  end
  if not kept then redis.call('DEL', index) end
end
local function everything()
  while true do
    local members = redis.call('ZRANGE', P .. 'x', 0, 99)
    if #members == 0 then return end
    for _, member in ipairs(members) do remove(member) end
    if spent() then cut = true return end
  end
end

local mark, worked = ARGV[2], false
for _, entry in ipairs(cjson.decode(ARGV[10])) do
  local seq = tonumber(entry[1])
  if seq > fm then
    if worked and spent() then cut = true end
    for e = 2, #entry do
      if cut then break end
      local how, name = entry[e][1], entry[e][2]
      if how == 'r' then
        if predates(name, seq) then remove(name) end
      elseif how == 'w' then
        if origin < tonumber(name) then everything() end
      else listed(P .. name, how, seq) end
    end
    -- Every forget below this entry is applied, and so are those up to the mark after it.
    if cut then
      mark = string.format('%d', seq - 1)
      break
    end
    worked = true
  end
end
if tonumber(mark) > fm then redis.call('SET', P .. 'fm', mark) end
if mark == ARGV[2] and ARGV[7] == 'last' then redis.call('DEL', P .. 'fo') end
if tonumber(mark) > fm then return mark end
return raw
