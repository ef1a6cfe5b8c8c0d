-- Shared Lua helpers. ARGV[1] is always the base of the group's keys (`P{g<k>}`, see layout.py):
-- every key built from it lies in the slot of the key the call declared first.
local P = ARGV[1]

-- Every script's reply starts with its result, the group's totals and its mark (``fm``, see
-- mark.lua): the process compares the mark with what it knows was forgotten.
local function totals(result)
  return {result, redis.call('GET', P .. 'n') or '0', redis.call('GET', P .. 'b') or '0',
    redis.call('GET', P .. 'fm') or ''}
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

-- The newest time among what a record holds, live or not: its messages' capture (when it holds
-- messages: `has_m`) and its summary's and categories' writes (when it holds one: `has_v`), as
-- Python's Entry.updated_at takes them; '-inf' for none. Spelled as Redis reads back the very
-- double Python wrote: the capture time as written, a decoded one with 17 digits. The score of
-- the record in its owner's index, which a turn's recall reads newest first (recent.lua).
-- `m_at`: the messages' capture time when the caller has it (a capture), read otherwise.
local function newest(rk, has_m, has_v, m_at)
  local best, bn = '-inf', nil
  if has_m then
    best = m_at or string.match(redis.call('HGET', rk, 'm') or '', '^%[([^,]+),') or '-inf'
    bn = tonumber(best)
  end
  if has_v then
    local d = cjson.decode(redis.call('HGET', rk, 'd') or 'null')
    if type(d) == 'table' then
      local cats = d[3]
      local held = {d[1] ~= cjson.null and d[2] or cjson.null,
        type(cats) == 'table' and next(cats) ~= nil and d[4] or cjson.null}
      for _, at in ipairs(held) do
        if at ~= cjson.null and (bn == nil or at > bn) then
          best, bn = string.format('%.17g', at), at
        end
      end
    end
  end
  return best
end

-- Recompute expiry, size, indexes and TTLs of a record after a change. The expiry is the
-- latest of the message and value expiries (strings written by Python, compared here), or
-- ``fallback`` for a record with no live values ('' keeps the stored expiry). Its owner index
-- scores it by `newest` (`m_at`: see there).
local function finish(rk, member, now, fallback, margin_ms, m_at)
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
  redis.call('ZADD', f[4], newest(rk, f[1], f[2], m_at), member)
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

-- Whether a fenced write must be refused because this group cannot vouch for it: the mark
-- (``P fm``, see mark.lua) is missing or being set (the group lost its data, or never had
-- any: its tombstones cannot be trusted), or is below `known_s`, the newest forget the writer
-- knows (the group went back in time: the forget's tombstones are missing, and the records it
-- evicted are back, which would hide the write and then take it with them when the group is
-- repaired), or the group was reset at a journal position above the write's (the '*'
-- tombstone: forgets before it were never seen here). The process repairs the group (and
-- replays the forgets since the write's position into its fence: see backfill.lua), then
-- writes again.
local function unvouched(pos_s, known_s)
  if pos_s == '' then return false end
  local fm = tonumber(redis.call('GET', P .. 'fm') or '')
  if not fm or fm < tonumber(known_s) then return true end
  local star = redis.call('HGET', P .. 'tb', '*')
  return star ~= false and tonumber(star) > tonumber(pos_s)
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

-- A forget's (or settings change's: ``settings`` true) targets in this group's fence: 'tb'
-- maps each target to its newest forget, 'th' is the newest forget recorded, 'tl' lists them
-- by time so those older than the journal's retention (``horizon``) are pruned. A settings
-- change also becomes the newest one ('sv'), which the owner reads return.
local function record(seq_s, targets, now, horizon, settings)
  local seq = tonumber(seq_s)
  if settings and seq > tonumber(redis.call('GET', P .. 'sv') or '0') then
    redis.call('SET', P .. 'sv', seq_s)
  end
  if #targets == 0 then return end
  for _, t in ipairs(targets) do
    local cur = redis.call('HGET', P .. 'tb', t)
    if not cur or tonumber(cur) < seq then redis.call('HSET', P .. 'tb', t, seq_s) end
    redis.call('ZADD', P .. 'tl', now, seq_s .. ' ' .. t)
  end
  if seq > tonumber(redis.call('GET', P .. 'th') or '0') then
    redis.call('SET', P .. 'th', seq_s)
  end
  local old = redis.call('ZRANGEBYSCORE', P .. 'tl', '-inf', '(' .. horizon, 'LIMIT', 0, 1000)
  for _, m in ipairs(old) do
    local sp = string.find(m, ' ', 1, true)
    local t = string.sub(m, sp + 1)
    if redis.call('HGET', P .. 'tb', t) == string.sub(m, 1, sp - 1) then
      redis.call('HDEL', P .. 'tb', t)
    end
    redis.call('ZREM', P .. 'tl', m)
  end
end

-- Whether a record holds anything written by a write that began before journal position
-- `seq`: its messages ('m', written at 'wm') or its durable mirror ('d', at 'wd'); a value
-- without a position (an unfenced write) counts as older. A replayed forget evicts only such
-- records: one written wholly by writes that began after it is new data, not what it forgot.
local function predates(member, seq)
  local f = redis.call('HMGET', P .. 'e:' .. member, 'm', 'wm', 'd', 'wd')
  for k = 1, 3, 2 do
    if f[k] and f[k] ~= '' then
      local at = tonumber(f[k + 1] or '')
      if not at or at < seq then return true end
    end
  end
  return false
end

-- Remove every record an index lists ('z': a sorted set, 's': a set), and the index;
-- with `seq`, only the records that predate it (and the index only once it lists none).
local function remove_listed(index, how, seq)
  local members
  if how == 'z' then members = redis.call('ZRANGE', index, 0, -1)
  else members = redis.call('SMEMBERS', index) end
  local n, kept = 0, false
  for _, member in ipairs(members) do
    if seq == nil or predates(member, seq) then n = n + remove(member) else kept = true end
  end
  if not kept then redis.call('DEL', index) end
  return n
end
