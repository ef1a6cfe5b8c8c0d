#!lua flags=allow-oom
-- KEYS[1] the turn's hash; ARGV[1] the capture claim's token. Gives the claim back after a
-- failed capture, if it is still that claim's (not taken over since). allow-oom: a full Redis
-- refuses new data, never this release (the failed capture's retry would wait out its lease).
if redis.call('HGET', KEYS[1], 'capture') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'capture', 'cap_until')
end
return 1
