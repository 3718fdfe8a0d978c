package redis

// writeScript is the one Lua script every write goes through (EVALSHA,
// EVAL on NOSCRIPT). It compares versions as 64-hex-digit strings
// (pipeline.Version.String), whose order is version order. ARGV[1] is the
// operation and ARGV[2] the format (h hash, j json).
//
// Operation w applies a chunk of row records, atomically, in order:
//
//	KEYS[2i-1], KEYS[2i]  record i's row key and its table's barrier key
//	ARGV[3…]  per record: op (u upsert, d delete), version, TTL in
//	          milliseconds (u: live TTL, d: tombstone TTL; 0: none), nk,
//	          nd, then nk names of Unchanged columns, then nd data
//	          arguments: h: field, value pairs (NULL columns absent);
//	          followed by the pair _v, version; j: the JSON document
//	          (Unchanged columns null)
//
// and returns per record 1 (applied), 0 (not newer than the key or the
// barrier) or an error message (the key is not a hash, its stored document
// is not JSON).
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
local barriers = {}
local function apply(key, bkey, rop, v, ttl, nk, first, last)
  local b = barriers[bkey]
  if b == nil then
    b = redis.call('GET', bkey) or false
    barriers[bkey] = b
  end
  if b and v < b then return 0 end
  local cur = redis.pcall('HGET', key, '_v')
  if type(cur) == 'table' and cur.err then return cur.err end
  if cur and cur >= v then return 0 end
  if rop == 'd' then
    if cur then redis.call('DEL', key) end
    redis.call('HSET', key, '_v', v, '_deleted', '1')
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    return 1
  end
  local names = first - nk
  if fmt == 'h' then
    local kept
    if cur then
      if nk > 0 then
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
    end
    -- The data arguments end with the pair '_v', version. Overwriting in
    -- place is cheaper than replacing the key; a field the new row lacks
    -- (a NULL, a dropped column, a tombstone's mark) shows as a longer
    -- hash, which is then rebuilt.
    redis.call('HSET', key, unpack(ARGV, first, last))
    if cur and redis.call('HLEN', key) > (last - first + 1) / 2 then
      redis.call('DEL', key)
      redis.call('HSET', key, unpack(ARGV, first, last))
    end
    if kept and #kept > 0 then redis.call('HSET', key, unpack(kept)) end
  else
    local doc = ARGV[first]
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
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  return 1
end
local res = {}
local a = 3
for r = 1, #KEYS / 2 do
  local nk, nd = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local first = a + 5 + nk
  res[r] = apply(KEYS[2 * r - 1], KEYS[2 * r], ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), nk, first, first + nd - 1)
  a = first + nd
end
return res
`
