-- Remove a registration and its observations, only if it was not updated meanwhile (issue 12 #5): of several
-- nodes expiring one registration, exactly one removes it and announces the expiry.
-- KEYS[1] registration blob, KEYS[2] expiry sorted set, KEYS[3] the device's observation-token set
-- ARGV[1] device id, ARGV[2] expected updated_at (repr) or "" for any, ARGV[3] observation key prefix
local blob = redis.call('GET', KEYS[1])
if not blob then
  return 0
end
if ARGV[2] ~= '' then
  local record = cmsgpack.unpack(blob)
  if record['updated_at'] ~= tonumber(ARGV[2]) then
    return 0
  end
end
for _, token in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('DEL', ARGV[3] .. token)
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
