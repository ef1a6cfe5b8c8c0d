-- KEYS: a record, its group's mark; ARGV: the record's fields. Both in one command: a
-- pipeline of two costs the client more than the server.
return {redis.call('HMGET', KEYS[1], unpack(ARGV)), redis.call('GET', KEYS[2]) or ''}
