#!lua
-- KEYS as above; ARGV: id, now, new expiry, ttl_ms, claim ('1': claim the capture; 'g': take
-- the one-upgrade guard for a tool call, when free), lease_ms, token (this claim's owner),
-- since (the claimer's journal position), call (a digest of the tool call's body).
-- A claim is a lease: its owner's token and a deadline on Redis's own clock (TIME: the one
-- clock every replica reads), taken over once the deadline has passed.
-- Answers false for a missing or expired turn; {'', 'capturing' or 'retry', ms left, owner}
-- while a live claim holds the capture, or this very tool call; else {args, upgrade state}:
-- 'claimed' when this call took the guard, 'lapsed' when it took it over from owners past
-- their deadline (then also: the first one's since, their tokens), else 'busy' (another
-- call is writing), 'done' or '' (free). The expiry moves forward.
local v = redis.call('HMGET', KEYS[1], 'args', 'exp', 'upgrade', 'capture', 'cap_until')
if not v[1] then return false end
if tonumber(v[2]) <= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
local function deadline()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return now, string.format('%d', now + tonumber(ARGV[6]))
end
local state, since, dead = v[3] or '', nil, nil
if ARGV[5] == '1' then
  local now, till = deadline()
  local left = tonumber(v[5] or '0') - now
  if v[4] and left > 0 then return {'', 'capturing', tostring(left), v[4]} end
  redis.call('HSET', KEYS[1], 'capture', ARGV[7], 'cap_until', till)
elseif ARGV[5] == 'g' and state == '' then
  local _, till = deadline()
  redis.call('HSET', KEYS[1], 'upgrade', 'busy', 'g_owner', ARGV[7], 'g_until', till,
    'g_since', ARGV[8], 'g_call', ARGV[9])
  redis.call('HDEL', KEYS[1], 'g_dead')
  state = 'claimed'
elseif ARGV[5] == 'g' and state == 'busy' then
  local now, till = deadline()
  local g = redis.call('HMGET', KEYS[1], 'g_owner', 'g_until', 'g_since', 'g_dead', 'g_call')
  local left = tonumber(g[2] or '0') - now
  if left > 0 and g[5] == ARGV[9] then return {'', 'retry', tostring(left), g[1] or ''} end
  if left <= 0 then
    -- Every owner since the guard was last settled: their writes are decided together.
    dead = g[1] or ''
    if g[4] then dead = g[4] .. ' ' .. dead end
    since = g[3] or '0'
    redis.call('HSET', KEYS[1], 'g_owner', ARGV[7], 'g_until', till, 'g_dead', dead,
      'g_call', ARGV[9])
    state = 'lapsed'
  end
end
redis.call('HSET', KEYS[1], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[1])
if state == 'lapsed' then return {v[1], state, since, dead} end
return {v[1], state}
