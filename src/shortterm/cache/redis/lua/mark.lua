-- ARGV: P, token, head ('' = claim), now. Resetting a group that has no mark, in two steps
-- (see repair.reset): the journal's end is read between them, so it is read after
-- whatever emptied the group.
-- Claim: the mark if set; 'busy' while another process resets the group; else 'claimed',
-- after holding the key as 'pending:<token>' for a few seconds (a process that dies lets go).
-- Set: if our claim still holds, drop every record of the group (nothing proves them
-- innocent), fence every write that began before `head` (the '*' tombstone) and make `head`
-- the mark; returns the mark, '' when the claim was lost.
local k = P .. 'fm'
local cur = redis.call('GET', k)
if ARGV[3] == '' then
  if cur and tonumber(cur) then return cur end
  if cur and cur ~= 'pending:' .. ARGV[2] then return 'busy' end
  redis.call('SET', k, 'pending:' .. ARGV[2], 'PX', 10000)
  return 'claimed'
end
if cur == 'pending:' .. ARGV[2] then
  for _, member in ipairs(redis.call('ZRANGE', P .. 'x', 0, -1)) do remove(member) end
  record(ARGV[3], {'*'}, ARGV[4], '-inf', false)
  redis.call('SET', k, ARGV[3])
  return ARGV[3]
end
if cur and tonumber(cur) then return cur end
return ''
