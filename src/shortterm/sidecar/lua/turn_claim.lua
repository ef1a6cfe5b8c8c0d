#!lua
-- KEYS[1] the turn's hash. The one-upgrade guard: 'ok' (this call may write), 'done',
-- 'busy' (another call is writing) or 'gone' (the turn ended).
if redis.call('EXISTS', KEYS[1]) == 0 then return 'gone' end
local state = redis.call('HGET', KEYS[1], 'upgrade')
if state then return state end
redis.call('HSET', KEYS[1], 'upgrade', 'busy')
return 'ok'
