-- ARGV: P, now, limit
local due = redis.call('ZRANGEBYSCORE', P .. 'x', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local now = tonumber(ARGV[2])
local n = 0
for _, member in ipairs(due) do
  local exp = redis.call('HGET', P .. 'e:' .. member, 'exp')
  if exp and tonumber(exp) > now then
    redis.call('ZADD', P .. 'x', exp, member)
  else
    n = n + remove(member)
  end
end
local t = totals(n)
t[5] = #due
return t
