#!lua flags=allow-oom
-- KEYS[1] the turn's hash; ARGV[1] '1' when the upgrade landed (or may have), ARGV[2] the
-- claim's token. Never recreates an ended turn. A claim taken over since is not ours to give
-- back; one given back with lapsed owners undecided (g_dead) is only expired, so that the
-- next call that claims decides them. allow-oom: a full Redis refuses new data, never a guard's
-- release.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'upgrade', 'done')
  redis.call('HDEL', KEYS[1], 'g_owner', 'g_until', 'g_since', 'g_dead', 'g_call')
elseif redis.call('HGET', KEYS[1], 'g_owner') == ARGV[2] then
  if redis.call('HEXISTS', KEYS[1], 'g_dead') == 1 then
    redis.call('HSET', KEYS[1], 'g_until', '0')
  else
    redis.call('HDEL', KEYS[1], 'upgrade', 'g_owner', 'g_until', 'g_since', 'g_call')
  end
end
return 1
