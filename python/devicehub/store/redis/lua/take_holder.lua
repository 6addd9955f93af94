-- A node takes devices (store/redis/holders.py, issue 31 #1/#4): each device's holder record names this node now, and
-- the work left waiting for it while no live node held it (park_work.lua) is taken with it, in one step per device.
-- KEYS: per device its holder record and its pending list (one slot: {dev:<id>}; a cluster calls once per device,
-- one Redis once per group of devices, issue 30 #5). ARGV[1] this node's id.
-- Returns per device {the previous holder or false, the pending work (possibly empty)}.
local taken = {}
for d = 1, #KEYS / 2 do
  local holder, waiting = KEYS[2 * d - 1], KEYS[2 * d]
  local previous = redis.call('SET', holder, ARGV[1], 'GET')
  local pending = redis.call('LRANGE', waiting, 0, -1)
  if #pending > 0 then
    redis.call('DEL', waiting)
  end
  taken[d] = {previous, pending}
end
return taken
