#!lua
-- KEYS as above; ARGV: id, now, new expiry, ttl_ms, claim ('1': claim the capture; 'g': take
-- the one-upgrade guard for a tool call, when free). Answers false for a missing or expired
-- turn, 'capturing' when the capture claim is taken, else {args, upgrade state}: 'claimed'
-- when this call took the guard, else 'busy' (another call is writing), 'done' or '' (free).
-- The expiry moves forward.
local v = redis.call('HMGET', KEYS[1], 'args', 'exp', 'upgrade', 'capture')
if not v[1] then return false end
if tonumber(v[2]) <= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
local state = v[3] or ''
if ARGV[5] == '1' then
  if v[4] then return 'capturing' end
  redis.call('HSET', KEYS[1], 'capture', '1')
elseif ARGV[5] == 'g' and state == '' then
  redis.call('HSET', KEYS[1], 'upgrade', 'busy')
  state = 'claimed'
end
redis.call('HSET', KEYS[1], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[1])
return {v[1], state}
