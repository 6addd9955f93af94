-- Queue a device request in one step (Store.enqueue_request): refused when its async-id is still pending for the
-- key, or when the device already has `max_pending` requests waiting (0: no bound).
-- KEYS[1] the request blob, KEYS[2] the device's queue (zset), KEYS[3] every queue (zset), KEYS[4] the sequence.
-- ARGV[1] the blob, ARGV[2] the queue member, ARGV[3] max_pending. Returns 0 queued, 1 duplicate, 2 full.
-- A write request also gives KEYS[5] the device's snapshot paths (zset), KEYS[6] its desired values (hash), ARGV[4]
-- the resource path and ARGV[5] the desired value: stored with the request, or neither.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 1
end
local bound = tonumber(ARGV[3])
if bound > 0 and redis.call('ZCARD', KEYS[2]) >= bound then
  return 2
end
if #KEYS == 6 then
  -- a script is not rolled back when a command fails: the snapshot's keys are checked before the first write
  local paths, desired = redis.call('TYPE', KEYS[5]).ok, redis.call('TYPE', KEYS[6]).ok
  if (paths ~= 'none' and paths ~= 'zset') or (desired ~= 'none' and desired ~= 'hash') then
    return redis.error_reply('WRONGTYPE the device snapshot is not a snapshot')
  end
end
local seq = redis.call('INCR', KEYS[4])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], seq, ARGV[2])
redis.call('ZADD', KEYS[3], seq, ARGV[2])
if #KEYS == 6 then
  redis.call('ZADD', KEYS[5], 0, ARGV[4])
  redis.call('HSET', KEYS[6], ARGV[4], ARGV[5])
end
return 0
