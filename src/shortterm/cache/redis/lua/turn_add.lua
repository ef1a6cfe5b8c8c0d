#!lua
-- KEYS[1] the turn's hash, KEYS[2] the index; ARGV: id, args, expiry, now, max_turns, ttl_ms,
-- the hash prefix. Drops expired ids (a batch), evicts the least recently used beyond
-- max_turns (uses at the same clock reading go in id order), then adds the turn. Answers
-- {expired, evicted, live}.
local expired = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[4], 'LIMIT', 0, 100)) do
  redis.call('DEL', ARGV[7] .. id)
  redis.call('ZREM', KEYS[2], id)
  expired = expired + 1
end
local evicted = 0
while redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  redis.call('DEL', ARGV[7] .. oldest[1])
  evicted = evicted + 1
end
redis.call('HSET', KEYS[1], 'args', ARGV[2], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return {expired, evicted, redis.call('ZCARD', KEYS[2])}
