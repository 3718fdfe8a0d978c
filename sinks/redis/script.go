package redis

// writeScript is the one Lua script every write goes through (EVALSHA,
// EVAL on NOSCRIPT). It compares versions as strings in the compact form
// (pipeline.Version.Compact), whose byte order is version order. ARGV[1]
// is the operation and ARGV[2] the format (h hash, j json).
//
// Operation w applies a chunk of row records of one table, atomically, in
// order:
//
//	KEYS[1]       the table's barrier key
//	KEYS[1+i]     record i's row key
//	ARGV[3], [4]  TTL in milliseconds of live keys and of tombstones (0: none;
//	              a negative tombstone TTL -t holds tombstones: no expiry,
//	              and the key joins the table's held set <base>#held with
//	              score t, the write time in milliseconds)
//	ARGV[5…]      per record one of
//	                d, version            a delete
//	                nd, data              an upsert without Unchanged columns
//	                -nk, nd, names, data  an upsert with nk Unchanged columns,
//	                                      names being theirs
//	              where data is nd arguments: h: the pair _v, version, then
//	              field, value pairs (NULL columns absent); j: version, then
//	              the JSON document, whose first member is _v (Unchanged
//	              columns null)
//
// and returns a flat list of i, message pairs, one per record the server
// refused (the key holds another type, or a string that is not a sluice
// document); a record older than the key's version or the barrier is not
// refused but skipped. Every argument a record does not need is left out:
// the per-record cost of the arguments is a large part of the server's
// work. The hash format reads and writes each key with its own commands;
// the json format reads the chunk's keys with one MGET, applies the
// records in order to that state in the script, and writes the keys that
// changed with one MSET (SET … PX for keys with a TTL).
//
// Operation x (KEYS[1] the barrier key, KEYS[2…] held keys, ARGV[3] now
// and ARGV[4] the tombstone TTL in milliseconds, ARGV[5…] the held keys'
// scores) releases held tombstones: each key still a tombstone without
// expiry expires TTL after its score (or is deleted when that is past);
// every key leaves the held set.
//
// Operation t (KEYS[1] the barrier key, ARGV[3] the version) raises the
// table's barrier; operation p (KEYS[1] the barrier key, KEYS[2…] row keys
// found by SCAN) deletes those of them older than the barrier.
//
// Operation f (KEYS[1] the barrier key, KEYS[2…] row keys found by SCAN,
// ARGV[3…] column, value pairs) gives each live row that lacks a column
// that column's value: the missing value of a column the source added
// (hash: a field the row lacks; json: a member it lacks, the document
// rebuilt with _v first). Tombstones and other keys are left alone. It
// returns how many rows it changed.
//
// A json-format document always starts with {"_v":"<version>", which is
// where the script reads a stored key's version (a Lua pattern anchored
// there), so it never parses a whole document to compare versions.
const writeScript = `
local op, fmt = ARGV[1], ARGV[2]
if op == 't' then
  local b = redis.call('GET', KEYS[1])
  if (not b) or ARGV[3] > b then redis.call('SET', KEYS[1], ARGV[3]) end
  return 1
end
if op == 'x' then
  -- Release tombstones held while their table's snapshot ran: each still
  -- held (a tombstone without expiry) expires TTL after it was written.
  local now, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
  local hk = string.sub(KEYS[1], 1, -9) .. '#held'
  for i = 2, #KEYS do
    local k = KEYS[i]
    local dead = false
    local ty = redis.call('TYPE', k).ok
    if fmt == 'h' and ty == 'hash' then
      dead = redis.call('HGET', k, '_deleted') == '1'
    elseif fmt == 'j' and ty == 'string' then
      dead = string.sub(redis.call('GET', k), -17) == ',"_deleted":true}'
    end
    if dead and redis.call('PTTL', k) == -1 then
      local left = tonumber(ARGV[3 + i]) + ttl - now
      if left > 0 then redis.call('PEXPIRE', k, left) else redis.call('DEL', k) end
    end
    redis.call('ZREM', hk, k)
  end
  return 1
end
if op == 'f' then
  local n = 0
  for i = 2, #KEYS do
    local k = KEYS[i]
    local ty = redis.call('TYPE', k).ok
    if fmt == 'h' and ty == 'hash' then
      if redis.call('HEXISTS', k, '_v') == 1 and redis.call('HGET', k, '_deleted') ~= '1' then
        local changed = 0
        for a = 3, #ARGV, 2 do changed = changed + redis.call('HSETNX', k, ARGV[a], ARGV[a + 1]) end
        if changed > 0 then n = n + 1 end
      end
    elseif fmt == 'j' and ty == 'string' then
      local s = redis.call('GET', k)
      local v = string.match(s, '^{"_v":"([0-9a-g]+)"')
      if v and string.sub(s, -17) ~= ',"_deleted":true}' then
        local ok, o = pcall(cjson.decode, s)
        if ok then
          local changed = false
          for a = 3, #ARGV, 2 do
            if o[ARGV[a]] == nil then
              o[ARGV[a]] = ARGV[a + 1]
              changed = true
            end
          end
          if changed then
            o._v = nil
            local rest = cjson.encode(o)
            if rest == '{}' then rest = '}' else rest = ',' .. string.sub(rest, 2) end
            redis.call('SET', k, '{"_v":"' .. v .. '"' .. rest, 'KEEPTTL')
            n = n + 1
          end
        end
      end
    end
  end
  return n
end
if op == 'p' then
  local b = redis.call('GET', KEYS[1])
  if not b then return 0 end
  local n = 0
  for i = 2, #KEYS do
    local k = KEYS[i]
    local kv
    if fmt == 'h' and redis.call('TYPE', k).ok == 'hash' then
      kv = redis.call('HGET', k, '_v')
    elseif fmt == 'j' and redis.call('TYPE', k).ok == 'string' then
      kv = string.match(redis.call('GET', k), '^{"_v":"([0-9a-g]+)"')
    end
    if kv and kv < b then
      redis.call('DEL', k)
      n = n + 1
    end
  end
  return n
end
local barrier = redis.call('GET', KEYS[1])
local live, tomb = tonumber(ARGV[3]), tonumber(ARGV[4])
-- A negative tomb holds tombstones: no expiry, and the key goes into the
-- table's held set scored by the write time -tomb (the table's snapshot
-- is running; a later 'x' call expires them).
local held = string.sub(KEYS[1], 1, -9) .. '#held'
local function hold(key)
  if tomb < 0 then redis.call('ZADD', held, -tomb, key) end
end
local failed = {}
-- records calls fn(r, version, nk, first, last) for each record in order,
-- r being its position in KEYS (first and last bound its data arguments;
-- nil for a delete), and collects the error messages fn returns.
local function records(fn)
  local a = 5
  for r = 2, #KEYS do
    local err
    local h = ARGV[a]
    if h == 'd' then
      err = fn(r, ARGV[a + 1])
      a = a + 2
    else
      local nk, nd = 0, tonumber(h)
      if nd < 0 then
        nk, nd = -nd, tonumber(ARGV[a + 1])
        a = a + 1
      end
      local first = a + 1 + nk
      local v = ARGV[first]
      if fmt == 'h' then v = ARGV[first + 1] end
      err = fn(r, v, nk, first, first + nd - 1)
      a = first + nd
    end
    if err then
      failed[#failed + 1] = r - 1
      failed[#failed + 1] = err
    end
  end
end
if fmt == 'j' then
  -- State per key, indexed by the key's first position in KEYS (arrays,
  -- not hashes: this loop is the script's per-record cost): the stored
  -- version (false: absent), the document, or why it cannot be written.
  local at, cur, doc, bad = {}, {}, {}, {}
  local stored = redis.call('MGET', unpack(KEYS, 2))
  local absent, na = {}, 0
  for i = 2, #KEYS do
    local k = KEYS[i]
    if not at[k] then
      at[k] = i
      local s = stored[i - 1]
      if s then
        local v = string.match(s, '^{"_v":"([0-9a-g]+)"')
        if v then
          cur[i], doc[i] = v, s
        else
          bad[i] = 'key holds a string that is not a sluice document'
        end
      else
        cur[i] = false
        na = na + 1
        absent[na] = k
      end
    end
  end
  -- MGET reads a key of another type as absent.
  if na > 0 and redis.call('EXISTS', unpack(absent)) > 0 then
    for _, k in ipairs(absent) do
      local t = redis.call('TYPE', k).ok
      if t ~= 'none' then bad[at[k]] = 'WRONGTYPE key holds a ' .. t .. ', not a string' end
    end
  end
  local out, ttl = {}, {}
  records(function(r, v, nk, first)
    local i = r
    if at[KEYS[r]] ~= r then i = at[KEYS[r]] end
    if bad[i] then return bad[i] end
    if barrier and v < barrier then return end
    local c = cur[i]
    if c and c >= v then return end
    local d, t
    if not first then
      d, t = '{"_v":"' .. v .. '","_deleted":true}', tomb
    else
      d, t = ARGV[first + 1], live
      local old = doc[i]
      if nk > 0 and old and string.sub(old, -17) ~= ',"_deleted":true}' then
        local ok1, o = pcall(cjson.decode, old)
        local ok2, n = pcall(cjson.decode, d)
        if not (ok1 and ok2) then return 'stored or new document is not JSON' end
        for j = first - nk, first - 1 do
          local x = o[ARGV[j]]
          if x == nil then x = cjson.null end
          n[ARGV[j]] = x
        end
        n._v = nil
        local rest = cjson.encode(n)
        if rest == '{}' then rest = '}' else rest = ',' .. string.sub(rest, 2) end
        d = '{"_v":"' .. v .. '"' .. rest
      end
    end
    out[i], ttl[i], cur[i], doc[i] = d, t, v, d
  end)
  local mset, nm = {}, 0
  for i = 2, #KEYS do
    local d = out[i]
    if d then
      if ttl[i] > 0 then
        redis.call('SET', KEYS[i], d, 'PX', ttl[i])
      else
        mset[nm + 1], mset[nm + 2] = KEYS[i], d
        nm = nm + 2
        if ttl[i] < 0 then hold(KEYS[i]) end
      end
    end
  end
  if nm > 0 then redis.call('MSET', unpack(mset)) end
  return failed
end
-- apply writes one record in the hash format; it returns an error message
-- or nothing.
local function apply(r, v, nk, first, last)
  local key = KEYS[r]
  if barrier and v < barrier then return end
  local cur = redis.pcall('HGET', key, '_v')
  if type(cur) == 'table' and cur.err then return cur.err end
  if cur and cur >= v then return end
  if not first then
    if cur then redis.call('DEL', key) end
    redis.call('HSET', key, '_v', v, '_deleted', '1')
    if tomb > 0 then redis.call('PEXPIRE', key, tomb) else hold(key) end
    return
  end
  local names = first - nk
  local kept
  if cur and nk > 0 then
    local ks = {}
    for i = names, first - 1 do ks[#ks + 1] = ARGV[i] end
    local old = redis.call('HMGET', key, unpack(ks))
    kept = {}
    for i, name in ipairs(ks) do
      if old[i] then
        kept[#kept + 1] = name
        kept[#kept + 1] = old[i]
      end
    end
  end
  -- Overwriting in place is cheaper than replacing the key; a field
  -- the new row lacks (a NULL, a dropped column, a tombstone's mark)
  -- shows as a longer hash, which is then rebuilt.
  redis.call('HSET', key, unpack(ARGV, first, last))
  if cur and redis.call('HLEN', key) > (last - first + 1) / 2 then
    redis.call('DEL', key)
    redis.call('HSET', key, unpack(ARGV, first, last))
  end
  if kept and #kept > 0 then redis.call('HSET', key, unpack(kept)) end
  if live > 0 then redis.call('PEXPIRE', key, live) end
end
records(apply)
return failed
`
