-- Every scope of one turn's capture, in one atomic call. ARGV: P, now, message expiry (also
-- the fallback expiry), margin_ms, fence position ('' = none), capture time as JSON, scope
-- count; then per scope: member, ok, ck, row_rev ('' = no row), meta, d, vexp, targets,
-- author count A, A x (author, author as JSON, author target), message count M, M x (author
-- number: 1..A, 0 = none; message as JSON), authors sorted as Python sorts them.
-- Returns the number applied, the totals and mark, then each scope's outcome: 1 written, 0 ignored (a
-- newer write of the scope already landed), -1 refused (a later forget covers the scope), -2
-- refused (every scope: the group cannot vouch for the write, see ``unvouched``).
-- Messages of authors purged since the write began are dropped from their scope, and the rest
-- is written: the same result as dropping them and calling again, without the second call.
local now, mexp, margin = ARGV[2], ARGV[3], tonumber(ARGV[4])
local pos, at = ARGV[5], ARGV[6]
if unvouched(pos) then
  local t = totals(0)
  for _ = 1, tonumber(ARGV[7]) do table.insert(t, -2) end
  return t
end
-- Was any forget recorded after the write began? Only then can a purge concern it.
local late = pos ~= '' and tonumber(redis.call('GET', P .. 'th') or '0') > tonumber(pos)

-- The scope's messages and authors without those of authors purged after `pos`.
local function unpurged(i, na)
  local gone, au = {}, {}
  for a = 1, na do
    local j = i + 3 * (a - 1)
    local seq = late and redis.call('HGET', P .. 'tb', ARGV[j + 2])
    if seq and tonumber(seq) > tonumber(pos) then gone[a] = true
    else table.insert(au, ARGV[j + 1]) end
  end
  i = i + 3 * na
  local nm = tonumber(ARGV[i])
  local kept = {}
  for k = 1, nm do
    local j = i + 2 * k - 1
    if not gone[tonumber(ARGV[j])] then table.insert(kept, ARGV[j + 1]) end
  end
  local m = '[' .. at .. ',[' .. table.concat(kept, ',') .. ']]'
  return m, (#kept > 0 and mexp or ''), '[' .. table.concat(au, ',') .. ']', i + 1 + 2 * nm
end

local function capture(i)
  local member, row_rev, meta = ARGV[i], ARGV[i + 3], ARGV[i + 4]
  local na = tonumber(ARGV[i + 8])
  local m, m_exp, au, after = unpurged(i + 9, na)
  if covered(pos, ARGV[i + 7]) then return -1, after end
  local rk = P .. 'e:' .. member
  local cur = redis.call('HMGET', rk, 'rev', 'au', 'meta')
  if row_rev ~= '' and cur[1] and tonumber(cur[1]) > tonumber(row_rev) then
    return 0, after
  end
  if not cur[1] then create(rk, ARGV[i + 1], ARGV[i + 2]) end
  if row_rev ~= '' then
    redis.call('HSET', rk, 'rev', row_rev, 'd', ARGV[i + 5])
    set_or_del(rk, 'wd', pos)  -- where the write began: see `predates` in the prelude
    set_or_del(rk, 'vexp', ARGV[i + 6])
  end
  if cur[3] and cjson.decode(cur[3])[5] == true then
    local decoded = cjson.decode(meta)
    if decoded[5] ~= true then decoded[5] = true; meta = cjson.encode(decoded) end  -- sticky
  end
  redis.call('HSET', rk, 'meta', meta, 'm', m)
  set_or_del(rk, 'wm', pos)
  set_or_del(rk, 'mexp', m_exp)
  set_authors(rk, member, cur[2], au)
  finish(rk, member, now, mexp, margin)
  return 1, after
end

local outcomes, applied, i = {}, 0, 8
for _ = 1, tonumber(ARGV[7]) do
  local outcome
  outcome, i = capture(i)
  if outcome == 1 then applied = applied + 1 end
  table.insert(outcomes, outcome)
end
local t = totals(applied)
for _, outcome in ipairs(outcomes) do table.insert(t, outcome) end
return t
