-- Leave work for a device whose holder is gone (store/redis/holders.py, issue 31 #1/#4): it waits in the device's
-- pending list until a node takes the device (take_holder.lua), as a queued request waits for the device's next
-- contact. Added only while the holder record still names the gone node, checked in the same step, so the node that
-- takes the device meanwhile cannot miss it: the caller hands the work to that node instead.
-- KEYS[1] the device's holder record, KEYS[2] its pending list (one slot: {dev:<id>}).
-- ARGV[1] the gone holder's id, ARGV[2] the work, ARGV[3] how long the list may wait (ms; the latest work's expiry).
-- Returns 1 when added, 0 when the record names another node now.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[2])
local ttl = redis.call('PTTL', KEYS[2])
if ttl < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
