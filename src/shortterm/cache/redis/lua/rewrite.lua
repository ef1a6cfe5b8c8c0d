-- ARGV: P, member, expected m, new m, mexp, au, now, margin_ms. Compare-and-set of the
-- messages: -1 when another writer changed them since they were read.
local member = ARGV[2]
local rk = P .. 'e:' .. member
local cur = redis.call('HMGET', rk, 'm', 'au')
if cur[1] ~= ARGV[3] then return totals(-1) end
redis.call('HSET', rk, 'm', ARGV[4])
set_or_del(rk, 'mexp', ARGV[5])
set_authors(rk, member, cur[2], ARGV[6])
finish(rk, member, ARGV[7], '', tonumber(ARGV[8]))
return totals(1)
