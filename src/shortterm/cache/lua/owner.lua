-- ARGV: P, owner key, marker key. Returns marker, the newest settings change recorded ('sv'),
-- then (member, meta, d, m, exp) per record.
local out = {redis.call('EXISTS', ARGV[3]), redis.call('GET', P .. 'sv') or '0'}
for _, member in ipairs(redis.call('ZRANGE', ARGV[2], 0, -1)) do
  local f = redis.call('HMGET', P .. 'e:' .. member, 'meta', 'd', 'm', 'exp')
  if f[1] then
    table.insert(out, member)
    table.insert(out, f[1])
    table.insert(out, f[2] or '')
    table.insert(out, f[3] or '')
    table.insert(out, f[4])
  else
    redis.call('ZREM', ARGV[2], member)  -- its record outlived its safety TTL
  end
end
return out
