-- ARGV: P, index key, 'z' (sorted set) or 's' (set), marker ('' = none)
local members
if ARGV[3] == 'z' then members = redis.call('ZRANGE', ARGV[2], 0, -1)
else members = redis.call('SMEMBERS', ARGV[2]) end
local n = 0
for _, member in ipairs(members) do n = n + remove(member) end
redis.call('DEL', ARGV[2])
if ARGV[4] ~= '' then redis.call('DEL', ARGV[4]) end
return totals(n)
