-- Writes given as one flat list of operations, applied in order (redis.py `Writes`, issue 16): queued as one
-- command in a MULTI instead of one command per write, the client packs and parses one command, not a dozen per
-- device of a registration batch. Each operation is its name followed by a fixed number of arguments; a key is
-- named by its position in KEYS (issue 31 #2: every key a script touches is declared, and in a cluster they share
-- one slot).
-- ARGV[1]: the list, msgpack (issue 30 #5: one argument for the client to pack, not one per operand):
--   SET k value | SWAP k value | DEL k | DELS {k, ...}: one DEL | ZADD k score member | ZADDNX k score member | ZREM k member |
--   SADD k member | SREM k member | HSET k field value | HDEL k field |
--   ZADDNXS k {members}: each member added at score 0 unless there | ZADDS k {score, member, ...}: one ZADD |
--   HSETS k {field, value, ...}: one HSET | HINCR k field: HINCRBY by 1 |
--   CHECK k field expected: unless the hash field holds `expected` ('' for no field), stop and return 0 (the
--   first operation of a write derived from a read of that field: issue 30 #5, the account's index generation
--   checked where a WATCH of it was a round trip of its own).
-- Returns the values each SWAP (a SET) replaced, in order (false where there was none), or 0 from a failed CHECK.
local arity = {
  SET = 2, SWAP = 2, DEL = 1, ZADD = 3, ZADDNX = 3, ZREM = 2, SADD = 2, SREM = 2, HSET = 3, HDEL = 2, ZADDNXS = 2,
  ZADDS = 2, HSETS = 2, DELS = 1, HINCR = 2, CHECK = 3
}
local CHUNK = 500  -- members per command: unpack() is bounded by Lua's C stack

local function zadd_new(key, members)
  local args = {'NX'}
  for _, member in ipairs(members) do
    args[#args + 1] = '0'  -- a string: a Lua number would be formatted back to text for every member
    args[#args + 1] = member
    if #args > 2 * CHUNK then
      redis.call('ZADD', key, unpack(args))
      args = {'NX'}
    end
  end
  if #args > 1 then
    redis.call('ZADD', key, unpack(args))
  end
end

local function many(command, key, pairs)  -- HSET field value ..., ZADD score member ...
  for i = 1, #pairs, 2 * CHUNK do
    redis.call(command, key, unpack(pairs, i, math.min(i + 2 * CHUNK - 1, #pairs)))
  end
end

local swapped = {}
local a = cmsgpack.unpack(ARGV[1])
if type(a) ~= 'table' then
  return redis.error_reply('apply_writes: ARGV[1] is not a msgpack list')
end
local i, n = 1, #a
while i <= n do
  local op = a[i]
  local count = arity[op]
  if count == nil then
    return redis.error_reply('apply_writes: unknown operation ' .. tostring(op))
  end
  if i + count > n then
    return redis.error_reply('apply_writes: ' .. op .. ' lacks arguments')
  end
  local key = KEYS[a[i + 1]]
  if op == 'DELS' then
    key = {}
    for j, position in ipairs(a[i + 1]) do
      key[j] = KEYS[position]
    end
    if #key ~= #a[i + 1] then
      key = nil
    end
  end
  if key == nil then
    return redis.error_reply('apply_writes: ' .. op .. ' names no declared key')
  end
  if op == 'CHECK' then
    if (redis.call('HGET', key, a[i + 2]) or '') ~= a[i + 3] then
      return 0
    end
  elseif op == 'SET' then
    redis.call('SET', key, a[i + 2])
  elseif op == 'SWAP' then
    swapped[#swapped + 1] = redis.call('SET', key, a[i + 2], 'GET')
  elseif op == 'DEL' then
    redis.call('DEL', key)
  elseif op == 'DELS' then
    redis.call('DEL', unpack(key))
  elseif op == 'ZADD' then
    redis.call('ZADD', key, a[i + 2], a[i + 3])
  elseif op == 'ZADDNX' then
    redis.call('ZADD', key, 'NX', a[i + 2], a[i + 3])
  elseif op == 'ZADDNXS' then
    zadd_new(key, a[i + 2])
  elseif op == 'HSETS' then
    many('HSET', key, a[i + 2])
  elseif op == 'ZADDS' then
    many('ZADD', key, a[i + 2])
  elseif op == 'ZREM' then
    redis.call('ZREM', key, a[i + 2])
  elseif op == 'SADD' then
    redis.call('SADD', key, a[i + 2])
  elseif op == 'SREM' then
    redis.call('SREM', key, a[i + 2])
  elseif op == 'HDEL' then
    redis.call('HDEL', key, a[i + 2])
  elseif op == 'HINCR' then
    redis.call('HINCRBY', key, a[i + 2], 1)
  else
    redis.call('HSET', key, a[i + 2], a[i + 3])
  end
  i = i + 1 + count
end
return swapped
