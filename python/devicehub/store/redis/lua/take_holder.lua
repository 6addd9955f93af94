-- A node takes a device (store/redis/holders.py, issue 31 #1/#4): its holder record names this node now, and the work
-- left waiting for the device while no live node held it (park_work.lua) is taken with it, in one step.
-- KEYS[1] the device's holder record, KEYS[2] its pending list (one slot: {dev:<id>}). ARGV[1] this node's id.
-- Returns {the previous holder or false, the pending work (possibly empty)}.
local previous = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
local pending = redis.call('LRANGE', KEYS[2], 0, -1)
if #pending > 0 then
  redis.call('DEL', KEYS[2])
end
return {previous, pending}
