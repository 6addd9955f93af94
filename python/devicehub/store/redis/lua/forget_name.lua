-- Drop an endpoint name's id in an account if it is still this device's (devices.py: a device renamed, moved or
-- deleted; another device may have claimed the name since).
-- KEYS[1] the name's ids per account; ARGV[1] the account, ARGV[2] the device id. Returns 1 when dropped.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
