-- Writes given as one flat list of operations, applied in order (redis.py `Writes`, issue 16): queued as one
-- command in a MULTI instead of one command per write, the client packs and parses one command, not a dozen per
-- device of a registration batch. Each operation is its name followed by a fixed number of arguments.
-- ARGV: SET key value | DEL key | ZADD key score member | ZADDNX key score member | ZREM key member |
--       SADD key member | SREM key member | HSET key field value. Returns the number of arguments read.
local arity = {SET = 2, DEL = 1, ZADD = 3, ZADDNX = 3, ZREM = 2, SADD = 2, SREM = 2, HSET = 3}
local a = ARGV
local i, n = 1, #ARGV
while i <= n do
  local op = a[i]
  local count = arity[op]
  if count == nil then
    return redis.error_reply('apply_writes: unknown operation ' .. tostring(op))
  end
  if i + count > n then
    return redis.error_reply('apply_writes: ' .. op .. ' lacks arguments')
  end
  if op == 'SET' then
    redis.call('SET', a[i + 1], a[i + 2])
  elseif op == 'DEL' then
    redis.call('DEL', a[i + 1])
  elseif op == 'ZADD' then
    redis.call('ZADD', a[i + 1], a[i + 2], a[i + 3])
  elseif op == 'ZADDNX' then
    redis.call('ZADD', a[i + 1], 'NX', a[i + 2], a[i + 3])
  elseif op == 'ZREM' then
    redis.call('ZREM', a[i + 1], a[i + 2])
  elseif op == 'SADD' then
    redis.call('SADD', a[i + 1], a[i + 2])
  elseif op == 'SREM' then
    redis.call('SREM', a[i + 1], a[i + 2])
  else
    redis.call('HSET', a[i + 1], a[i + 2], a[i + 3])
  end
  i = i + 1 + count
end
return n
