-- ARGV: P, author key. Returns (member, m) per record listed under the author.
local out = {}
for _, member in ipairs(redis.call('SMEMBERS', ARGV[2])) do
  local m = redis.call('HGET', P .. 'e:' .. member, 'm')
  if m then
    table.insert(out, member)
    table.insert(out, m)
  else
    redis.call('SREM', ARGV[2], member)
  end
end
return out
