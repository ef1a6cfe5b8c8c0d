-- ARGV: P, seq, now, prune horizon, 's' for a settings change ('' for a forget), target...
-- Records a forget's targets in this group (see ``record`` in the prelude).
local targets = {}
for i = 6, #ARGV do table.insert(targets, ARGV[i]) end
record(ARGV[2], targets, ARGV[3], ARGV[4], ARGV[5] == 's')
return totals(1)
