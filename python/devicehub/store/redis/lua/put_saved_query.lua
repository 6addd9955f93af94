-- A saved directory query written with its name's claim, in the account's slot (saved_queries.py).
-- KEYS[1] the account's queries (hash id -> record), KEYS[2] its names (hash name -> id).
-- ARGV[1] id, ARGV[2] name, ARGV[3] record, ARGV[4] '1' to create, ARGV[5] the most queries an account keeps.
-- Returns 'done', 'name' (another query has the name), 'full' or 'missing' (an update of no query).
local owner = redis.call('HGET', KEYS[2], ARGV[2])
if owner and owner ~= ARGV[1] then
  return 'name'
end
local old = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[4] == '1' then
  if old then
    return 'name'
  end
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
    return 'full'
  end
elseif not old then
  return 'missing'
end
if old then
  local previous = cmsgpack.unpack(old)['name']
  if previous ~= ARGV[2] then
    redis.call('HDEL', KEYS[2], previous)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 'done'
