#!lua
-- KEYS as above; ARGV[1] the id, ARGV[2] '1' when captured (the turn ends) or '0' (the claim
-- is given back, if it is still ours: ARGV[3] its token).
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
elseif redis.call('HGET', KEYS[1], 'capture') == ARGV[3] then
  redis.call('HDEL', KEYS[1], 'capture', 'cap_until')
end
return 1
