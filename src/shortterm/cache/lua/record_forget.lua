-- ARGV: the group base, seq, now, prune horizon, 's' for a settings change ('' for a forget), target...
-- Records a forget's targets, then prunes the ones older than the journal's retention. A
-- settings change also becomes the newest one ('sv'), which the owner reads return.
local P = ARGV[1]
local seq = tonumber(ARGV[2])
if ARGV[5] == 's' and seq > tonumber(redis.call('GET', P .. 'sv') or '0') then
  redis.call('SET', P .. 'sv', ARGV[2])
end
if #ARGV < 6 then return 1 end
for i = 6, #ARGV do
  local cur = redis.call('HGET', P .. 'tb', ARGV[i])
  if not cur or tonumber(cur) < seq then redis.call('HSET', P .. 'tb', ARGV[i], ARGV[2]) end
  redis.call('ZADD', P .. 'tl', ARGV[3], ARGV[2] .. ' ' .. ARGV[i])
end
if seq > tonumber(redis.call('GET', P .. 'th') or '0') then
  redis.call('SET', P .. 'th', ARGV[2])
end
local old = redis.call('ZRANGEBYSCORE', P .. 'tl', '-inf', '(' .. ARGV[4], 'LIMIT', 0, 1000)
for _, m in ipairs(old) do
  local sp = string.find(m, ' ', 1, true)
  local t = string.sub(m, sp + 1)
  if redis.call('HGET', P .. 'tb', t) == string.sub(m, 1, sp - 1) then
    redis.call('HDEL', P .. 'tb', t)
  end
  redis.call('ZREM', P .. 'tl', m)
end
return 1
