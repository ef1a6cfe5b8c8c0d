-- ARGV: P, member
return totals(remove(ARGV[2]))
