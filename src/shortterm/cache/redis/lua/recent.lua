-- KEYS: an owner's index in one group (its keys scored by `newest`, see prelude.lua), the
-- group's mark, with 's' in ARGV[3] the group's copy of the newest settings change, then
-- records of the group to read. ARGV: the first and last rank of the index to read, newest
-- first ('' = none), then what else to read: 's' the settings change, 'r' the records of the
-- keys read from the index (of the same slot). Few arguments: a client packs each one.
-- Returns the mark, the settings change ('' when not asked), the index's members and scores
-- (flat, newest first; ties in reverse byte order), the records of those members (when asked),
-- then each named record's fields: meta, d, m (what a view of it needs). Read together in one
-- command, so the mark vouches for what it comes with.
local out = {redis.call('GET', KEYS[2]) or '', '', {}, {}}
local first = 3
if string.find(ARGV[3], 's', 1, true) then
  out[2] = redis.call('GET', KEYS[3]) or ''
  first = 4
end
if ARGV[1] ~= '' then
  out[3] = redis.call('ZREVRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')
  if string.find(ARGV[3], 'r', 1, true) then
    local base = string.sub(KEYS[2], 1, -3)  -- the group's `P{g<k>}`, before 'fm'
    for i = 1, #out[3], 2 do
      table.insert(out[4], redis.call('HMGET', base .. 'e:' .. out[3][i], 'meta', 'd', 'm'))
    end
  end
end
for k = first, #KEYS do
  table.insert(out, redis.call('HMGET', KEYS[k], 'meta', 'd', 'm'))
end
return out
