#!lua
-- KEYS[1] the turn's hash; ARGV[1] '1' when the upgrade landed. Never recreates an ended turn.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == '1' then redis.call('HSET', KEYS[1], 'upgrade', 'done')
else redis.call('HDEL', KEYS[1], 'upgrade') end
return 1
