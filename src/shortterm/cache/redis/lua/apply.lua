-- ARGV: P, member, ok, ck, rev, meta, d, vexp, now, fallback, margin_ms, fence position
-- ('' = none), targets, the newest forget the writer knows. Returns 1 written, 0 older than
-- the cached row, -1 refused by a later forget, -2 refused: the group cannot vouch for the
-- write (see ``unvouched``).
local member = ARGV[2]
local rk = P .. 'e:' .. member
if unvouched(ARGV[12], ARGV[14]) then return totals(-2) end
if covered(ARGV[12], ARGV[13]) then return totals(-1) end
local cur = redis.call('HGET', rk, 'rev')
if cur and tonumber(cur) >= tonumber(ARGV[5]) then return totals(0) end
if not cur then create(rk, ARGV[3], ARGV[4]) end
redis.call('HSET', rk, 'rev', ARGV[5], 'meta', ARGV[6], 'd', ARGV[7])
set_or_del(rk, 'wd', ARGV[12])  -- where the write began: see `predates` in the prelude
set_or_del(rk, 'vexp', ARGV[8])
finish(rk, member, ARGV[9], ARGV[10], tonumber(ARGV[11]))
return totals(1)
