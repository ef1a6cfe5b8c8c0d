-- Every scope of one turn's capture, in one atomic call. ARGV: P, now, message expiry (also
-- the fallback expiry), margin_ms, fence position ('' = none), capture time as JSON, scope
-- count, append ('' = the messages replace the stored ones; n = they follow the stored ones,
-- a stored message whose id they carry dropped, and the newest n are kept), the newest
-- forget the writer knows (see ``unvouched``); then per scope:
-- member, ok, ck, row_rev ('' = no row), meta, d, vexp, targets, author count A,
-- A x (author, author as JSON, author target), message count M, M x (author number: 1..A,
-- 0 = none; message as JSON), authors sorted as Python sorts them.
-- Returns the number applied, the totals and mark, then each scope's outcome: 1 written,
-- 0 ignored (a newer write of the scope already landed), -1 refused (a later forget covers
-- the scope), -2 refused (every scope: the group cannot vouch for the write, see
-- ``unvouched``).
-- Messages of authors purged since the write began are dropped from their scope, and the rest
-- is written: the same result as dropping them and calling again, without the second call.
-- An appending capture whose durable row is older than the stored one still adds its
-- messages (only its mirror is stale): two turns appending at once both stay.
local now, mexp, margin = ARGV[2], ARGV[3], tonumber(ARGV[4])
local pos, at, append = ARGV[5], ARGV[6], tonumber(ARGV[8])
if unvouched(pos, ARGV[9]) then
  local t = totals(0)
  for _ = 1, tonumber(ARGV[7]) do table.insert(t, -2) end
  return t
end
-- Was any forget recorded after the write began? Only then can a purge concern it.
local late = pos ~= '' and tonumber(redis.call('GET', P .. 'th') or '0') > tonumber(pos)

-- The scope's messages and authors without those of authors purged after `pos`, and without
-- the bot's answers to them: the rule of shortterm.model.dialogue, decided on the messages as
-- given (a bot message answers the nearest user message before it; before any, no one).
local function unpurged(i, na)
  local gone, au, any = {}, {}, false
  for a = 1, na do
    local seq = late and redis.call('HGET', P .. 'tb', ARGV[i + 3 * (a - 1) + 2])
    if seq and tonumber(seq) > tonumber(pos) then gone[a] = true; any = true end
  end
  local first = i
  i = i + 3 * na
  local nm = tonumber(ARGV[i])
  local kept = {}
  if not any then
    for a = 1, na do table.insert(au, ARGV[first + 3 * (a - 1) + 1]) end
    for k = 1, nm do table.insert(kept, ARGV[i + 2 * k]) end
    return kept, au, i + 1 + 2 * nm
  end
  -- A message is a JSON array whose first item is its role: '["user",...' or '["assistant",...'.
  local held, answering = {}, false
  for k = 1, nm do
    local j = i + 2 * k - 1
    local a, text = tonumber(ARGV[j]), ARGV[j + 1]
    if string.sub(text, 1, 8) == '["user",' then answering = gone[a] == true end
    if not answering and not gone[a] then
      table.insert(kept, text)
      held[a] = true
    end
  end
  -- Only the authors still holding a message: an author whose messages were all answers to a
  -- purged user is not listed, so the index stays exact.
  for a = 1, na do
    if held[a] then table.insert(au, ARGV[first + 3 * (a - 1) + 1]) end
  end
  return kept, au, i + 1 + 2 * nm
end

-- The messages of a record's 'm' ('[at,[message,...]]') as their JSON texts, without
-- re-encoding them (cjson would round their times): a message is a flat JSON array, so it
-- ends at the first ']' outside a string.
local function stored_texts(m)
  local texts, p = {}, string.find(m, ',[', 1, true) + 2
  while string.sub(m, p, p) == '[' do
    local q, c = p + 1, nil
    while true do
      c = string.find(m, '["%]]', q)
      if string.sub(m, c, c) == ']' then break end
      q = c + 1
      while true do  -- to the string's closing quote, stepping over escapes
        local e = string.find(m, '["\\]', q)
        if string.sub(m, e, e) == '"' then q = e + 1; break end
        q = e + 2
      end
    end
    table.insert(texts, string.sub(m, p, c))
    p = c + 2
  end
  return texts
end

-- What an appending capture stores: the live stored messages not repeated by id among the
-- new ones, then the new ones, the newest `append` of them; its authors are the union (an
-- author whose messages fell off the end stays listed: the index may over-include, never
-- miss); its position the oldest of the messages' writes ('' when one was unfenced). `held`:
-- the record's 'm', 'mexp' and 'wm'; `stored_au`: its 'au'.
local function appended(held, stored_au, new, au)
  if not held[1] or not held[2] or tonumber(held[2]) <= tonumber(now) then return new, au, pos end
  local ids = {}
  for _, text in ipairs(new) do
    local id = cjson.decode(text)[6]
    if id ~= cjson.null then ids[id] = true end
  end
  local merged, old = {}, cjson.decode(held[1])[2]
  for k, text in ipairs(stored_texts(held[1])) do
    local id = old[k][6]
    if id == cjson.null or not ids[id] then table.insert(merged, text) end
  end
  for _, text in ipairs(new) do table.insert(merged, text) end
  if #merged > append then merged = {unpack(merged, #merged - append + 1)} end
  local listed, union = {}, {}
  for _, a in ipairs(cjson.decode(stored_au or '[]')) do
    listed[a] = true; table.insert(union, cjson.encode(a))
  end
  for _, a in ipairs(au) do
    if not listed[cjson.decode(a)] then table.insert(union, a) end
  end
  local wm = pos
  if #merged > #new then  -- stored messages stay: the record is as old as their write
    local was = held[3] or ''
    if was == '' or pos == '' then wm = ''
    elseif tonumber(was) < tonumber(pos) then wm = was end
  end
  return merged, union, wm
end

-- The capture's meta over the stored one (both JSON arrays: server id, server name, channel
-- name, parent, private, lineage): what it does not know (null) keeps the stored value and
-- the private flag is sticky, as the durable upserts do (ScopeMeta.over).
local function over(meta, stored)
  local new, old, changed = cjson.decode(meta), cjson.decode(stored), false
  for k = 1, 6 do
    local keep = (k == 5 and old[k] == true and new[k] ~= true)
      or (k ~= 5 and new[k] == cjson.null and old[k] ~= cjson.null)
    if keep then new[k] = old[k]; changed = true end
  end
  if changed then return cjson.encode(new) end
  return meta
end

local function capture(i)
  local member, row_rev, meta = ARGV[i], ARGV[i + 3], ARGV[i + 4]
  local na = tonumber(ARGV[i + 8])
  local kept, au, after = unpurged(i + 9, na)
  if covered(pos, ARGV[i + 7]) then return -1, after end
  local rk = P .. 'e:' .. member
  local cur = redis.call('HMGET', rk, 'rev', 'au', 'meta')
  local stale = row_rev ~= '' and cur[1] and tonumber(cur[1]) > tonumber(row_rev)
  if stale and not append then return 0, after end
  if not cur[1] then create(rk, ARGV[i + 1], ARGV[i + 2]) end
  if row_rev ~= '' and not stale then
    redis.call('HSET', rk, 'rev', row_rev, 'd', ARGV[i + 5])
    set_or_del(rk, 'wd', pos)  -- where the write began: see `predates` in the prelude
    set_or_del(rk, 'vexp', ARGV[i + 6])
  end
  if cur[3] and cur[3] ~= meta then meta = over(meta, cur[3]) end
  local wm = pos
  if append then
    local held = redis.call('HMGET', rk, 'm', 'mexp', 'wm')  -- only an append reads them
    kept, au, wm = appended(held, cur[2], kept, au)
  end
  local m = '[' .. at .. ',[' .. table.concat(kept, ',') .. ']]'
  if not stale then redis.call('HSET', rk, 'meta', meta) end
  redis.call('HSET', rk, 'm', m)
  set_or_del(rk, 'wm', wm)
  set_or_del(rk, 'mexp', #kept > 0 and mexp or '')
  set_authors(rk, member, cur[2], '[' .. table.concat(au, ',') .. ']')
  finish(rk, member, now, mexp, margin, at)  -- `at`: the time of the messages it holds
  return 1, after
end

local outcomes, applied, i = {}, 0, 10
for _ = 1, tonumber(ARGV[7]) do
  local outcome
  outcome, i = capture(i)
  if outcome == 1 then applied = applied + 1 end
  table.insert(outcomes, outcome)
end
local t = totals(applied)
for _, outcome in ipairs(outcomes) do table.insert(t, outcome) end
return t
