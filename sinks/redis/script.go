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
//	ARGV[3], [4]  TTL in milliseconds of live keys and of tombstones (0: none)
//	ARGV[5…]      per record one of
//	                d, version            a delete
//	                nd, data              an upsert without Unchanged columns
//	                -nk, nd, names, data  an upsert with nk Unchanged columns,
//	                                      names being theirs
//	              where data is nd arguments: h: the pair _v, version, then
//	              field, value pairs (NULL columns absent); j: version, then
//	              the JSON document (Unchanged columns null)
//
// and returns a flat list of i, message pairs, one per record the server
// refused (the key is not a hash, its stored document is not JSON); a
// record older than the key's _v or the barrier is not refused but skipped.
// Every argument a record does not need is left out: the per-record cost of
// the arguments is a large part of the server's work.
//
// Operation t (KEYS[1] the barrier key, ARGV[3] the version) raises the
// table's barrier; operation p (KEYS[1] the barrier key, KEYS[2…] row keys
// found by SCAN) deletes those of them older than the barrier.
const writeScript = `
local op, fmt = ARGV[1], ARGV[2]
if op == 't' then
  local b = redis.call('GET', KEYS[1])
  if (not b) or ARGV[3] > b then redis.call('SET', KEYS[1], ARGV[3]) end
  return 1
end
if op == 'p' then
  local b = redis.call('GET', KEYS[1])
  if not b then return 0 end
  local n = 0
  for i = 2, #KEYS do
    local k = KEYS[i]
    if redis.call('TYPE', k).ok == 'hash' then
      local kv = redis.call('HGET', k, '_v')
      if kv and kv < b then
        redis.call('DEL', k)
        n = n + 1
      end
    end
  end
  return n
end
local barrier = redis.call('GET', KEYS[1])
local live, tomb = tonumber(ARGV[3]), tonumber(ARGV[4])
-- apply writes one record; first and last bound its data arguments (nil
-- for a delete). It returns an error message or nothing.
local function apply(key, v, nk, first, last)
  if barrier and v < barrier then return end
  local cur = redis.pcall('HGET', key, '_v')
  if type(cur) == 'table' and cur.err then return cur.err end
  if cur and cur >= v then return end
  if not first then
    if cur then redis.call('DEL', key) end
    redis.call('HSET', key, '_v', v, '_deleted', '1')
    if tomb > 0 then redis.call('PEXPIRE', key, tomb) end
    return
  end
  local names = first - nk
  if fmt == 'h' then
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
  else
    local doc = ARGV[first + 1]
    if cur then
      if nk > 0 then
        local old = redis.call('HGET', key, 'doc')
        if old then
          local ok1, o = pcall(cjson.decode, old)
          local ok2, d = pcall(cjson.decode, doc)
          if not (ok1 and ok2) then return 'stored or new document is not JSON' end
          for i = names, first - 1 do
            local x = o[ARGV[i]]
            if x == nil then x = cjson.null end
            d[ARGV[i]] = x
          end
          doc = cjson.encode(d)
        end
      end
      redis.call('DEL', key)
    end
    redis.call('HSET', key, '_v', v, 'doc', doc)
  end
  if live > 0 then redis.call('PEXPIRE', key, live) end
end
local failed = {}
local a = 5
for r = 2, #KEYS do
  local err
  local h = ARGV[a]
  if h == 'd' then
    err = apply(KEYS[r], ARGV[a + 1])
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
    err = apply(KEYS[r], v, nk, first, first + nd - 1)
    a = first + nd
  end
  if err then
    failed[#failed + 1] = r - 1
    failed[#failed + 1] = err
  end
end
return failed
`
