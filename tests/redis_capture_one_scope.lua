-- The one-scope capture script that capture.lua replaced (one call per scope, purged authors
-- answered with -2 for the caller to drop and call again): kept as the oracle the
-- multi-scope script is compared with in tests/test_redis_capture.py.
-- ARGV: P, member, ok, ck, row_rev ('' = no row), meta, d, vexp, m, mexp, au, now, fallback,
-- margin_ms, fence position ('' = none), targets, [[author, target], ...]. Returns -1 when the
-- fence covers the scope, -2 (and the authors) when authors of the messages were purged since
-- the write began: the caller drops their messages and calls again, so the write lands only in
-- a call whose every check passed.
local member = ARGV[2]
local rk = P .. 'e:' .. member
if covered(ARGV[15], ARGV[16]) then return totals(-1) end
if ARGV[15] ~= '' and tonumber(redis.call('GET', P .. 'th') or '0') > tonumber(ARGV[15]) then
  local gone = {}
  for _, pair in ipairs(cjson.decode(ARGV[17])) do
    local seq = redis.call('HGET', P .. 'tb', pair[2])
    if seq and tonumber(seq) > tonumber(ARGV[15]) then table.insert(gone, pair[1]) end
  end
  if #gone > 0 then
    local t = totals(-2)
    t[5] = cjson.encode(gone)
    return t
  end
end
local cur = redis.call('HMGET', rk, 'rev', 'au', 'meta')
local row_rev = ARGV[5]
if row_rev ~= '' and cur[1] and tonumber(cur[1]) > tonumber(row_rev) then
  return totals(0)  -- a newer write of this scope already landed
end
if not cur[1] then create(rk, ARGV[3], ARGV[4]) end
if row_rev ~= '' then
  redis.call('HSET', rk, 'rev', row_rev, 'd', ARGV[7])
  set_or_del(rk, 'vexp', ARGV[8])
  set_or_del(rk, 'wd', ARGV[15])
end
local meta = ARGV[6]
if cur[3] then  -- what the capture does not know keeps the stored value; private is sticky
  local m, old, changed = cjson.decode(meta), cjson.decode(cur[3]), false
  for k = 1, 6 do
    if k == 5 and old[5] == true and m[5] ~= true then m[5] = true; changed = true end
    if k ~= 5 and m[k] == cjson.null and old[k] ~= cjson.null then m[k] = old[k]; changed = true end
  end
  if changed then meta = cjson.encode(m) end
end
redis.call('HSET', rk, 'meta', meta, 'm', ARGV[9])
set_or_del(rk, 'wm', ARGV[15])
set_or_del(rk, 'mexp', ARGV[10])
set_authors(rk, member, cur[2], ARGV[11])
finish(rk, member, ARGV[12], ARGV[13], tonumber(ARGV[14]))
return totals(1)
