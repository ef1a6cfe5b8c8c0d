#!lua
-- KEYS as above; ARGV: id, now, new expiry, ttl_ms, claim ('1': claim the capture). Answers
-- false for a missing or expired turn, 'capturing' when the claim is taken, else
-- {args, upgrade state}; the expiry moves forward.
local v = redis.call('HMGET', KEYS[1], 'args', 'exp', 'upgrade', 'capture')
if not v[1] then return false end
if tonumber(v[2]) <= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
if ARGV[5] == '1' then
  if v[4] then return 'capturing' end
  redis.call('HSET', KEYS[1], 'capture', '1')
end
redis.call('HSET', KEYS[1], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[1])
return {v[1], v[3] or ''}
