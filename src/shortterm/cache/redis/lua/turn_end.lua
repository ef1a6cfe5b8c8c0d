#!lua
-- KEYS[1] the turn's hash, KEYS[2] the index; ARGV[1] the id. Ends the turn: it rides with its
-- capture's write, and a full Redis (noeviction) refuses both alike, so a capture refused for
-- want of memory does not end its turn.
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
