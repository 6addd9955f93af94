-- Drop a device's holder record if it still names this node (channels/holders.py): another node that took the
-- device since keeps its own record.
-- KEYS[1] the device's holder record. ARGV[1] this node's id.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
