-- ARGV: P, position, up, now, prune horizon, entry count; per entry: seq, 's' for a settings
-- change ('' else), target count T, T targets: the forgets journaled in (`position`, `up`].
-- Lets the group vouch for a write that began at journal position `position` although it was
-- reset above it (the '*' tombstone: the forgets before the reset were never recorded here):
-- the forgets between the two are recorded in its fence, and the '*' tombstone moves down to
-- `position`. A write that began there is then checked against every forget after it, as if
-- the group had never lost them. No record needs evicting: the reset dropped every record, and
-- every record written since began at or after the reset.
-- An entry fencing every write before it (a prune: target '*') stops the move there.
-- Returns 'ok' when the group vouches for writes at `position` (as far as the '*' tombstone
-- goes), 'fenced' when a journaled '*' after `position` refuses them, 'short' when the group
-- has no mark or was reset above `up` (read the journal again).
local pos, up = tonumber(ARGV[2]), tonumber(ARGV[3])
if not tonumber(redis.call('GET', P .. 'fm') or '') then return 'short' end
local star = tonumber(redis.call('HGET', P .. 'tb', '*') or '')
if not star or star <= pos then return 'ok' end
if star > up then return 'short' end
local floor, i = ARGV[2], 7
for _ = 1, tonumber(ARGV[6]) do
  local seq, settings, nt = ARGV[i], ARGV[i + 1] == 's', tonumber(ARGV[i + 2])
  local targets = {}
  for t = 1, nt do
    local target = ARGV[i + 2 + t]
    if target ~= '*' then table.insert(targets, target)
    elseif tonumber(seq) <= star and tonumber(seq) > tonumber(floor) then floor = seq end
  end
  if tonumber(seq) <= star then record(seq, targets, ARGV[4], ARGV[5], settings) end
  i = i + 3 + nt
end
-- Kept as `record` keeps a tombstone: with its time, so that it is pruned like the others.
redis.call('HSET', P .. 'tb', '*', floor)
redis.call('ZADD', P .. 'tl', ARGV[4], floor .. ' *')
if floor ~= ARGV[2] then return 'fenced' end
return 'ok'
