-- ARGV: the group base, token, head ('' = claim). The floor's two steps (see RedisCache.restore_floor).
-- Claim: the floor if set; 'busy' while another process sets it; else 'claimed', after
-- holding the key as 'pending:<token>' for a few seconds (a process that dies lets go).
-- Set: the floor becomes head if our claim still holds; returns the floor, '' if it is gone.
local k = ARGV[1] .. 'ep'
local cur = redis.call('GET', k)
if ARGV[3] == '' then
  if cur and tonumber(cur) then return cur end
  if cur and cur ~= 'pending:' .. ARGV[2] then return 'busy' end
  redis.call('SET', k, 'pending:' .. ARGV[2], 'PX', 10000)
  return 'claimed'
end
if cur == 'pending:' .. ARGV[2] then
  redis.call('SET', k, ARGV[3])
  return ARGV[3]
end
if cur and tonumber(cur) then return cur end
return ''
