-- ARGV: P, index key, 'z' (sorted set) or 's' (set), marker ('' = none)
local n = remove_listed(ARGV[2], ARGV[3])
if ARGV[4] ~= '' then redis.call('DEL', ARGV[4]) end
return totals(n)
