-- Shared Lua helpers. ARGV[1] is always the base of the group's keys (`P{g<k>}`, see redis_layout):
-- every key built from it lies in the slot of the key the call declared first.
local P = ARGV[1]

local function totals(result)
  return {result, redis.call('GET', P .. 'n') or '0', redis.call('GET', P .. 'b') or '0'}
end

local function set_or_del(rk, field, value)
  if value == '' then redis.call('HDEL', rk, field) else redis.call('HSET', rk, field, value) end
end

-- Never shorten an index key's TTL: it must outlive every record it lists.
local function extend(k, ms)
  local cur = redis.call('PTTL', k)
  if cur == -1 or (cur >= 0 and cur < ms) then redis.call('PEXPIRE', k, ms) end
end

local function set_authors(rk, member, old_json, new_json)
  old_json = old_json or '[]'
  if old_json == new_json then return end
  local old, new = {}, {}
  for _, a in ipairs(cjson.decode(old_json)) do old[a] = true end
  for _, a in ipairs(cjson.decode(new_json)) do new[a] = true end
  for a in pairs(old) do
    if not new[a] then redis.call('SREM', P .. 'a:' .. a, member) end
  end
  for a in pairs(new) do
    if not old[a] then redis.call('SADD', P .. 'a:' .. a, member) end
  end
  redis.call('HSET', rk, 'au', new_json)
end

-- Recompute expiry, size, indexes and TTLs of a record after a change. The expiry is the
-- latest of the message and value expiries (strings written by Python, compared here), or
-- ``fallback`` for a record with no live values ('' keeps the stored expiry).
local function finish(rk, member, now, fallback, margin_ms)
  local f = redis.call('HMGET', rk, 'mexp', 'vexp', 'size', 'ok', 'ck', 'au', 'exp')
  local best, bn = nil, nil
  for i = 1, 2 do
    if f[i] then
      local n = tonumber(f[i])
      if bn == nil or n > bn then best, bn = f[i], n end
    end
  end
  if best == nil then
    if fallback == '' then best = f[7] else best = fallback end
    bn = tonumber(best)
  end
  local size = 200 + redis.call('HSTRLEN', rk, 'm') + redis.call('HSTRLEN', rk, 'd')
    + redis.call('HSTRLEN', rk, 'meta')
  redis.call('INCRBY', P .. 'b', size - (tonumber(f[3]) or 0))
  redis.call('HSET', rk, 'exp', best, 'size', size)
  redis.call('ZADD', P .. 'x', best, member)
  redis.call('ZADD', f[4], now, member)
  redis.call('SADD', f[5], member)
  local ms = math.floor((bn - tonumber(now)) * 1000) + margin_ms
  if ms < 1000 then ms = 1000 end
  redis.call('PEXPIRE', rk, ms)
  extend(f[4], ms)
  extend(f[5], ms)
  for _, a in ipairs(cjson.decode(f[6] or '[]')) do extend(P .. 'a:' .. a, ms) end
end

local function create(rk, ok, ck)
  redis.call('HSET', rk, 'rev', '0', 'ok', ok, 'ck', ck, 'au', '[]')
  redis.call('INCR', P .. 'n')
end

-- The fence (see shortterm.fence): 'tb' maps each target to its newest forget, 'th' is the
-- newest forget recorded. A write that began at position `pos` is covered when one of its
-- targets was forgotten later. Returns true when covered.
local function covered(pos_s, targets_json)
  if pos_s == '' then return false end
  local pos = tonumber(pos_s)
  if tonumber(redis.call('GET', P .. 'th') or '0') <= pos then return false end
  for _, t in ipairs(cjson.decode(targets_json)) do
    local seq = redis.call('HGET', P .. 'tb', t)
    if seq and tonumber(seq) > pos then return true end
  end
  return false
end

-- The floor (``P ep``, see RedisCache.restore_floor): the durable journal's end when this
-- server was first used, or found empty again. `req` is '1' from a process that set or read
-- it. Such a process's fenced write is refused when the floor is gone (the server lost its
-- data, and the tombstones with it) or above the write's position (the write may predate a
-- forget whose tombstones were lost). Returns true when refused.
local function below_floor(req, pos_s)
  if req == '' or pos_s == '' then return false end
  local floor = tonumber(redis.call('GET', P .. 'ep') or '')
  return floor == nil or tonumber(pos_s) < floor
end

local function remove(member)
  local rk = P .. 'e:' .. member
  local f = redis.call('HMGET', rk, 'ok', 'ck', 'au', 'size')
  redis.call('ZREM', P .. 'x', member)
  if not f[1] then return 0 end
  redis.call('ZREM', f[1], member)
  redis.call('SREM', f[2], member)
  for _, a in ipairs(cjson.decode(f[3] or '[]')) do redis.call('SREM', P .. 'a:' .. a, member) end
  redis.call('DEL', rk)
  redis.call('DECR', P .. 'n')
  redis.call('DECRBY', P .. 'b', tonumber(f[4]) or 0)
  return 1
end
